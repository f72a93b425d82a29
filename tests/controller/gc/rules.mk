# tests/controller/gc: checkpoint GC and end-of-life records of kdet-controller (private
# PostgreSQL, kdet-local), and the kill -9 chaos run of a real experiment.
$(eval $(call kd_test_script,test_ctrl_e2e_gc,tests/controller/gc/gc.sh,180,,$(CTRL_E2E_DEPS) $(O)/bin/dtrain))
$(eval $(call kd_test_script,test_ctrl_e2e_chaos,e2e/controller/chaos.sh,480,slow,$(CTRL_E2E_DEPS) $(O)/bin/fashion-mnist-c))
