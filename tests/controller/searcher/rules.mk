# Tests for controller/searcher.
SEARCH_TEST_LIBS := searcher hparams core
$(eval $(call kd_test,test_search_methods,tests/controller/searcher/test_methods.c tests/controller/searcher/sim.c,$(SEARCH_TEST_LIBS),-ljansson -lm,120))
