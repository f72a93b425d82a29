# tests/controller/soak: the soak test (e2e/soak, docs/soak.md) and its fault proxy.
# test_ctrl_e2e_soak runs 2 minutes in `make check` and 5 in `make e2e` (KD_SOAK_DURATION,
# set by the Makefile); `slow` keeps it out of the sanitizer pass of `make check`. `make soak DURATION=30m` runs a long one.
SOAK_DEPS := $(CTRL_E2E_DEPS) $(O)/bin/fashion-mnist-c $(O)/bin/kdet-search \
             $(O)/lib/libdtrain.so $(PY_PKG_OUT)
$(eval $(call kd_test_script,test_ctrl_e2e_soak,e2e/soak/soak.py,1500,slow,$(SOAK_DEPS)))
$(eval $(call kd_test_script,test_soak_faultproxy,tests/controller/soak/test_faultproxy.py,60,noasan,))
$(eval $(call kd_test_script,test_soak_invariants,tests/controller/soak/test_invariants.py,60,noasan,))
