# Tests of lib/k8s. Unit tests need no server; the integration tests start kdet-local.
K8S_LIBS := k8s yaml core
K8S_LDLIBS := -ljansson -lyaml -lcurl -lm
$(eval $(call kd_test,test_k8s_status,tests/lib/k8s/test_status.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_path,tests/lib/k8s/test_path.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_position,tests/lib/k8s/test_position.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_queue,tests/lib/k8s/test_queue.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_cache,tests/lib/k8s/test_cache.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_ratelimit,tests/lib/k8s/test_ratelimit.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
$(eval $(call kd_test,test_k8s_client_unit,tests/lib/k8s/test_client_unit.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_informer_unit,tests/lib/k8s/test_informer_unit.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_watch_lines,tests/lib/k8s/test_watch_lines.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
$(eval $(call kd_test,test_k8s_config,tests/lib/k8s/test_config.c,$(K8S_LIBS),$(K8S_LDLIBS),30))
# Integration tests against a real kdet-local, built first as their dependency.
K8S_LOCAL_DEP := $(O)/bin/kdet-local
K8S_LOCAL_SRCS := tests/lib/k8s/kdet_local.c
$(eval $(call kd_test,test_k8s_local_rest,tests/lib/k8s/test_local_rest.c $(K8S_LOCAL_SRCS),$(K8S_LIBS),$(K8S_LDLIBS),120,,$(K8S_LOCAL_DEP)))
$(eval $(call kd_test,test_k8s_local_watch,tests/lib/k8s/test_local_watch.c $(K8S_LOCAL_SRCS),$(K8S_LIBS),$(K8S_LDLIBS),120,,$(K8S_LOCAL_DEP)))
$(eval $(call kd_test,test_k8s_local_leader,tests/lib/k8s/test_local_leader.c $(K8S_LOCAL_SRCS),$(K8S_LIBS),$(K8S_LDLIBS),120,,$(K8S_LOCAL_DEP)))
$(eval $(call kd_test,test_k8s_tls,tests/lib/k8s/test_tls.c,$(K8S_LIBS),$(K8S_LDLIBS),60))
# libFuzzer targets (make fuzz): network answers and kubeconfig files.
K8S_FUZZ_CORE := $(wildcard lib/core/*.c)
$(eval $(call kd_fuzz,fuzz_k8s_watch,tests/lib/k8s/fuzz_watch.c lib/k8s/status.c lib/k8s/path.c lib/k8s/client.c lib/k8s/ratelimit.c lib/k8s/config.c lib/yaml/yaml.c $(K8S_FUZZ_CORE),-ljansson -lyaml -lcurl -lm,tests/fuzz/corpus/k8s_watch))
$(eval $(call kd_fuzz,fuzz_k8s_kubeconfig,tests/lib/k8s/fuzz_kubeconfig.c lib/k8s/config.c lib/yaml/yaml.c $(K8S_FUZZ_CORE),-ljansson -lyaml -lm,tests/fuzz/corpus/k8s_kubeconfig tests/data/k8s/kubeconfig))
