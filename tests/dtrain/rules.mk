# tests/dtrain: libdtrain across real processes (ranks are this test binary
# re-executed with the kdet-launch environment; see ranks.h).
DT_TEST_LIBS := $(DTRAIN_KD_LIBS)
DT_TEST_LDLIBS := $(DTRAIN_LDLIBS)
$(eval $(call kd_test,test_dtrain_coll,tests/dtrain/test_coll.c tests/dtrain/ranks.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS),240))
$(eval $(call kd_test,test_dtrain_rendezvous,tests/dtrain/test_rendezvous.c tests/dtrain/ranks.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS),180,,$(O)/bin/dtrain))
$(eval $(call kd_test,test_dtrain_peer_death,tests/dtrain/test_peer_death.c tests/dtrain/ranks.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS),180))
$(eval $(call kd_test,test_dtrain_unit,tests/dtrain/test_unit.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS) -lm,60))
$(eval $(call kd_test,test_dtrain_fmnist,tests/dtrain/test_fmnist.c tests/dtrain/ranks.c,,-lm,240,,$(O)/bin/fashion-mnist-c))
$(eval $(call kd_test_script,test_dtrain_fmnist_full,tests/dtrain/fmnist_full.sh,300,slow,$(O)/tests/test_dtrain_fmnist $(O)/bin/fashion-mnist-c))
$(eval $(call kd_test_script,test_dtrain_launch,tests/dtrain/launch.sh,180,,$(O)/bin/kdet-launch $(O)/bin/dtrain $(O)/bin/fashion-mnist-c))
$(eval $(call kd_test,test_dtrain_nccl,tests/dtrain/test_nccl.c tests/dtrain/ranks.c,$(DT_TEST_LIBS),$(DT_TEST_LDLIBS),180,gpu))
