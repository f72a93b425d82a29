# controller/searcher: the searcher library (one file per method) and kdet-search.
SEARCHER_SRCS := $(addprefix controller/searcher/,searcher.c early_stop.c simple.c single.c \
                   grid.c random.c bayesian.c asha.c pbt.c)
$(eval $(call kd_lib,searcher,$(SEARCHER_SRCS)))
# kdet-search reads YAML configs through lib/config, JSON ones directly.
$(eval $(call kd_prog,kdet-search,controller/searcher/search_main.c,searcher hparams config yaml core,-ljansson -lyaml -lm))
