# tests/controller/demo: idle trials give their GPUs back (ASHA with more trials than slots).
# Included before tests/controller/rules.mk (sorted), so CTRL_E2E_DEPS is spelled out here.
IDLE_E2E_DEPS := $(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det \
                 $(O)/bin/fashion-mnist-c
$(eval $(call kd_test_script,test_ctrl_e2e_idle,e2e/controller/idle.sh,180,,$(IDLE_E2E_DEPS)))
