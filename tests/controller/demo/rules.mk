# tests/controller/demo: idle trials give their GPUs back (ASHA with more trials than slots).
# Included before tests/controller/rules.mk (sorted), so CTRL_E2E_DEPS is spelled out here.
IDLE_E2E_DEPS := $(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det \
                 $(O)/bin/fashion-mnist-c
$(eval $(call kd_test_script,test_ctrl_e2e_idle,e2e/controller/idle.sh,180,,$(IDLE_E2E_DEPS)))
# The worker API's answers for idle trials and killed experiments (fixtures of tests/controller/api).
$(O)/obj/tests/controller/api/test_api_idle.o: KD_CFLAGS += -Icontroller
$(eval $(call kd_test,test_api_idle,tests/controller/api/test_api_idle.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
