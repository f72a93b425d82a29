# local/: kdet-local, the embedded control plane (its own node, plus `kdet-local kubelet` node agents).
LOCAL_LIB_SRCS := local/api.c local/reply.c local/discovery.c local/strategy.c local/list.c local/gc.c local/podlog.c local/registry.c local/store.c local/selector.c local/patch.c \
                  local/quantity.c local/scheduler.c local/kubelet.c local/table.c \
                  local/proto.c local/events.c local/tls.c local/logproxy.c local/logstream.c \
                  local/flags.c local/validate.c local/runas.c local/proctree.c
$(eval $(call kd_lib,local,$(LOCAL_LIB_SRCS)))
$(eval $(call kd_prog,kdet-local,local/main.c local/agent.c,local k8s yaml openapi http core,-lmicrohttpd -lcurl -ljansson -lyaml -lssl -lcrypto -lm -ldl -lpthread))
DEB_PACKAGES += libmicrohttpd-dev libjansson-dev libssl-dev uthash-dev
