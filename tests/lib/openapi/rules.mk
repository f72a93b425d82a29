$(eval $(call kd_test,test_openapi,tests/lib/openapi/test_openapi.c,openapi core,-ljansson -lm,30))
