# lib/hparams: hyperparameter spaces (parse, grid, sampling) and the PRNG.
$(eval $(call kd_lib,hparams,lib/hparams/rng.c lib/hparams/space.c))
