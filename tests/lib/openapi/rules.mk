$(eval $(call kd_test,test_openapi,tests/lib/openapi/test_openapi.c,openapi core,-ljansson -lm,30))
# libFuzzer target (make fuzz): [schema, instance] pairs.
$(eval $(call kd_fuzz,fuzz_openapi,tests/lib/openapi/fuzz_openapi.c lib/openapi/openapi.c $(wildcard lib/core/*.c),-ljansson -lm,tests/fuzz/corpus/openapi))
