# controller/searcher: the searcher library (one file per method) and kdet-search.
SEARCHER_SRCS := $(addprefix controller/searcher/,searcher.c early_stop.c simple.c single.c \
                   grid.c random.c bayesian.c asha.c pbt.c)
$(eval $(call kd_lib,searcher,$(SEARCHER_SRCS)))
# Headers are spelled "searcher/searcher.h", relative to controller/.
$(O)/obj/controller/searcher/%.o $(O)/obj/tests/controller/searcher/%.o: KD_CFLAGS += -Icontroller

# kdet-search reads YAML configs through lib/config when that library is in the tree;
# without it (or with SEARCH_WITH_CONFIG=0), it reads JSON configs only.
SEARCH_WITH_CONFIG ?= 1
ifneq ($(wildcard lib/config/rules.mk),)
ifneq ($(SEARCH_WITH_CONFIG),0)
SEARCH_CFG_LIBS := config yaml
$(O)/obj/controller/searcher/search_main.o: KD_CFLAGS += -DKD_SEARCH_HAVE_CONFIG=1
SEARCH_CFG_LDLIBS := -lyaml
endif
endif
$(eval $(call kd_prog,kdet-search,controller/searcher/search_main.c,searcher hparams $(SEARCH_CFG_LIBS) core,-ljansson $(SEARCH_CFG_LDLIBS) -lm))
