# Tests of lib/k8s. Unit tests need no server; the integration tests start kdet-local.
K8S_LIBS := k8s yaml core
K8S_LDLIBS := -ljansson -lyaml -lcurl
$(eval $(call kd_test,test_k8s_status,tests/lib/k8s/test_status.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_path,tests/lib/k8s/test_path.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
