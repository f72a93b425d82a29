# tests/controller/flags: kdet-controller's command-line validation (no cluster needed).
$(eval $(call kd_test_script,test_ctrl_flags,tests/controller/flags/flags.sh,30,,$(O)/bin/kdet-controller))
