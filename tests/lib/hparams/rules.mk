# Tests for lib/hparams.
$(eval $(call kd_test,test_hparams_rng,tests/lib/hparams/test_rng.c,hparams core,-lm,30))
$(eval $(call kd_test,test_hparams_space,tests/lib/hparams/test_space.c,hparams core,-ljansson -lm,30))
