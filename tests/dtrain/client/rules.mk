# libdtrain's controller client against the real API (private PostgreSQL + kdet-local).
# dtrain/src/client.c is compiled in directly so these tests do not depend on the rest of
# libdtrain.
$(O)/obj/tests/dtrain/client/%.o: KD_CFLAGS += -Itests -Itests/controller/api -iquote controller
$(eval $(call kd_test,test_dclient_api,tests/dtrain/client/test_dclient.c dtrain/src/client.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
