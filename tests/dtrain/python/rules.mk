# tests/dtrain/python: the kdet Python package (dtrain/python) with Debian's
# /usr/bin/python3 and python3-torch (CPU, gloo). Tagged noasan: the subject
# is the Python side, and an ASan-built libdtrain.so cannot be loaded into an
# uninstrumented interpreter.
$(eval $(call kd_test_script,test_py_local,tests/dtrain/python/test_local.py,180,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch))
$(eval $(call kd_test_script,test_py_ranks,tests/dtrain/python/test_ranks.py,240,noasan,$(O)/lib/libdtrain.so $(O)/bin/kdet-launch))
