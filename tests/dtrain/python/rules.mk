# tests/dtrain/python: the kdet Python package (dtrain/python) with Debian's
# /usr/bin/python3 and python3-torch (CPU, gloo). Tagged noasan: the subject
# is the Python side, and an ASan-built libdtrain.so cannot be loaded into an
# uninstrumented interpreter.
$(eval $(call kd_test_script,test_py_local,tests/dtrain/python/test_local.py,180,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch))
$(eval $(call kd_test_script,test_py_ranks,tests/dtrain/python/test_ranks.py,240,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch))

# The harness against the real controller API (fixture of tests/controller/api).
$(O)/obj/tests/dtrain/python/%.o: KD_CFLAGS += -Itests -Itests/controller/api -iquote controller
$(eval $(call kd_test,test_py_api,tests/dtrain/python/test_py_api.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),240,noasan,$(API_TEST_DEPS) $(O)/lib/libdtrain.so))

# The profiler: /proc parsing (fixtures in tests/data/profiler), NVML against a stand-in, the
# sampler thread, the Trainer's timings.
$(eval $(call kd_test_script,test_py_profiler,tests/dtrain/python/test_profiler.py,180,noasan,$(O)/lib/libdtrain.so $(PY_PKG_OUT)))

# Determined's Python API names (determined.*) on kdet, off-cluster: one and two ranks.
$(eval $(call kd_test_script,test_py_determined,tests/dtrain/python/test_determined.py,240,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch $(PY_PKG_OUT)))
$(eval $(call kd_test_script,test_py_determined_ranks,tests/dtrain/python/test_determined_ranks.py,300,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch $(O)/bin/wrap_rank $(PY_PKG_OUT)))
# The Trainer's loop: lengths and units, resume after SIGKILL bit for bit, gradient
# aggregation, AMP and clipping, reducers, two gloo ranks (no_sync, fp16 compression).
$(eval $(call kd_test_script,test_py_harness,tests/dtrain/python/test_harness.py,240,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch $(PY_PKG_OUT)))
# The Trainer-API example as an experiment on kdet-local + kdet-controller + PostgreSQL.
$(eval $(call kd_test_script,test_py_e2e_determined,tests/dtrain/python/e2e_determined.sh,420,slow noasan,$(CTRL_E2E_DEPS) $(O)/lib/libdtrain.so $(O)/bin/wrap_rank $(PY_PKG_OUT)))
# The profiler and the Trainer's max_length under a searcher without one, end to end.
$(eval $(call kd_test_script,test_py_e2e_profiler,tests/dtrain/python/e2e_profiler.sh,240,slow noasan,$(CTRL_E2E_DEPS) $(O)/lib/libdtrain.so $(PY_PKG_OUT)))
# adaptive_asha with time_metric: Core API trials promoted and stopped by the reported epochs.
$(eval $(call kd_test_script,test_py_e2e_asha_time,tests/dtrain/python/e2e_asha_time.sh,300,slow noasan,$(CTRL_E2E_DEPS) $(O)/lib/libdtrain.so $(PY_PKG_OUT)))
