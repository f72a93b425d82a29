# Tests for kdet-local and lib/http.
$(eval $(call kd_test_script,test_local_conformance,tests/local/conformance.sh,300,,$(O)/bin/kdet-local))
$(eval $(call kd_test,test_local_selector,tests/local/test_selector.c,local core,-ljansson,30))
$(eval $(call kd_test,test_local_patch,tests/local/test_patch.c,local core,-ljansson,30))
$(eval $(call kd_test,test_local_store,tests/local/test_store.c,local core,-ljansson,60))
$(eval $(call kd_test,test_local_http,tests/local/test_http.c,http core,-lmicrohttpd -ljansson -lcurl,60))
$(eval $(call kd_test_script,test_local_durability,tests/local/durability.sh,180,slow,$(O)/bin/kdet-local))
$(eval $(call kd_test,test_local_table,tests/local/test_table.c,local core,-ljansson -lm,30))
# The scheduler's pure decisions (which pods count as bound or pending, which share a class), as tables.
$(eval $(call kd_test,test_local_scheduler,tests/local/test_scheduler.c,local core,-ljansson -lm,30))
$(eval $(call kd_test,test_local_proctree,tests/local/test_proctree.c,local core,,30))
$(eval $(call kd_test,test_local_proto,tests/local/test_proto.c,local core,-ljansson -lcrypto,30))
$(eval $(call kd_test_script,test_local_auth,tests/local/auth.sh,60,,$(O)/bin/kdet-local))
# libFuzzer targets (make fuzz), each replayed over its corpus by test_fuzz_*: protobuf bodies,
# selectors and patches from clients; the built-in kinds' validation and object names.
LOCAL_FUZZ_SRCS := $(LOCAL_LIB_SRCS) $(wildcard lib/k8s/*.c lib/yaml/*.c lib/openapi/*.c lib/http/*.c lib/core/*.c)
LOCAL_FUZZ_LDLIBS := -lmicrohttpd -lcurl -ljansson -lyaml -lssl -lcrypto -lm -ldl -lpthread -lz
$(eval $(call kd_fuzz,fuzz_local_validate,tests/local/fuzz_validate.c $(LOCAL_FUZZ_SRCS),$(LOCAL_FUZZ_LDLIBS),tests/fuzz/corpus/local_validate))
$(eval $(call kd_fuzz,fuzz_local_parsers,tests/local/fuzz_parsers.c local/proto.c local/selector.c local/patch.c $(wildcard lib/core/*.c),-ljansson -lcrypto,tests/fuzz/corpus/local_parsers))
$(eval $(call kd_test_script,test_kubelet_agent,tests/local/kubelet.sh,180,,$(O)/bin/kdet-local))
$(eval $(call kd_test_script,test_local_api,tests/local/api.sh,120,,$(O)/bin/kdet-local $(O)/bin/det))
$(eval $(call kd_test_script,test_local_multinode,tests/local/multinode.sh,120,,$(O)/bin/kdet-local))
# Built-in kinds' validation (types, quantities, names, sizes) and the kubelet's log paths, as a table.
$(eval $(call kd_test,test_local_validate,tests/local/test_validate.c,local k8s yaml openapi http core,-lmicrohttpd -lcurl -ljansson -lyaml -lssl -lcrypto -lm -ldl -lpthread,30))
# securityContext → the uid, gid and groups a container runs as (or the kubelet's refusal), as a table.
$(eval $(call kd_test,test_local_runas,tests/local/test_runas.c,local core,-ljansson,30))
# kdet-local's request handling: an in-process API server fed one connection's bytes per input.
$(eval $(call kd_fuzz,fuzz_local_api,tests/local/fuzz_api.c $(LOCAL_FUZZ_SRCS),$(LOCAL_FUZZ_LDLIBS),tests/fuzz/corpus/local_api))
