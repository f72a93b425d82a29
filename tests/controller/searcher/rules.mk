# Tests for controller/searcher.
SEARCH_TEST_LIBS := searcher hparams core
$(eval $(call kd_test,test_search_methods,tests/controller/searcher/test_methods.c tests/controller/searcher/sim.c,$(SEARCH_TEST_LIBS),-ljansson -lm,120))
$(eval $(call kd_test,test_search_snapshot,tests/controller/searcher/test_snapshot.c tests/controller/searcher/sim.c,$(SEARCH_TEST_LIBS),-ljansson -lm,120))
$(eval $(call kd_test,test_search_early_stop,tests/controller/searcher/test_early_stop.c tests/controller/searcher/sim.c,$(SEARCH_TEST_LIBS),-ljansson -lm,60))
$(eval $(call kd_test_script,test_search_cli,tests/controller/searcher/test_cli.sh,60,,$(O)/bin/kdet-search))
# libFuzzer: restore from untrusted snapshots, then arbitrary events (make fuzz).
$(eval $(call kd_fuzz,fuzz_searcher,tests/controller/searcher/fuzz_searcher.c $(SEARCHER_SRCS) lib/hparams/rng.c lib/hparams/space.c $(wildcard lib/core/*.c),-ljansson -lm,tests/controller/searcher/fuzz_corpus,-iquote controller))
