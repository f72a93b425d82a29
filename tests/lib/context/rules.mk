$(eval $(call kd_test,test_context_ignore,tests/lib/context/test_ignore.c,context core,,30))
$(eval $(call kd_test,test_context_pack,tests/lib/context/test_pack.c,context core,-larchive -lcrypto,60))
# libFuzzer targets (make fuzz): hostile archives and .detignore text.
$(eval $(call kd_fuzz,fuzz_context_unpack,tests/lib/context/fuzz_unpack.c lib/context/context.c lib/context/ignore.c $(wildcard lib/core/*.c),-larchive -lcrypto,tests/fuzz/corpus/context_unpack))
$(eval $(call kd_fuzz,fuzz_detignore,tests/lib/context/fuzz_detignore.c lib/context/ignore.c $(wildcard lib/core/*.c),,tests/fuzz/corpus/detignore))
# make bench BENCH=context_pack: det's context packing against GNU tar + gzip.
DEB_PACKAGES += hyperfine
$(eval $(call kd_bench,context_pack,tests/lib/context/bench_pack.sh,$(O)/bin/det))
