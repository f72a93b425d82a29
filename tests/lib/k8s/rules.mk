# Tests of lib/k8s. Unit tests need no server; the integration tests start kdet-local.
K8S_LIBS := k8s yaml core
K8S_LDLIBS := -ljansson -lyaml -lcurl -lm
$(eval $(call kd_test,test_k8s_status,tests/lib/k8s/test_status.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_path,tests/lib/k8s/test_path.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_queue,tests/lib/k8s/test_queue.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_cache,tests/lib/k8s/test_cache.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_ratelimit,tests/lib/k8s/test_ratelimit.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_watch_lines,tests/lib/k8s/test_watch_lines.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_config,tests/lib/k8s/test_config.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
