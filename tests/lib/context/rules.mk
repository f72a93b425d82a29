$(eval $(call kd_test,test_context_ignore,tests/lib/context/test_ignore.c,context core,,30))
$(eval $(call kd_test,test_context_pack,tests/lib/context/test_pack.c,context core,-larchive -lcrypto,60))
