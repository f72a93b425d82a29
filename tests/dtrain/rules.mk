# tests/dtrain: libdtrain across real processes (ranks are this test binary
# re-executed with the kdet-launch environment; see ranks.h).
DT_TEST_LIBS := $(DTRAIN_KD_LIBS)
DT_TEST_LDLIBS := $(DTRAIN_LDLIBS)
$(eval $(call kd_test,test_dtrain_coll,tests/dtrain/test_coll.c tests/dtrain/ranks.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS),240))
