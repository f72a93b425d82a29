# Controller API tests: each program starts a private PostgreSQL (tests/support/pg.c) and a
# real kdet-local (tests/lib/k8s/kdet_local.c) with the CRDs applied, then the API.
API_TEST_SRCS := tests/controller/api/fx.c tests/support/pg.c tests/lib/k8s/kdet_local.c
API_TEST_KD_LIBS := api http store metrics k8s tfevents storage yaml core
API_TEST_LDLIBS := -lmicrohttpd -lpq -lcurl -lcrypto -ljansson -lyaml -lm -lpthread
API_TEST_DEPS := $(O)/bin/kdet-local
$(O)/obj/tests/controller/api/%.o: KD_CFLAGS += -Itests -Itests/controller/api
$(O)/obj/tests/controller/api/test_api_chief.o $(O)/obj/tests/controller/api/test_api_logs.o: KD_CFLAGS += -Ilauncher
$(eval $(call kd_test,test_api_worker,tests/controller/api/test_api_worker.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
$(eval $(call kd_test,test_api_user,tests/controller/api/test_api_user.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# Figures (latency, rows/s, long-poll wake-up); `slow`, so not in the sanitizer pass.
$(eval $(call kd_test,test_api_perf,tests/controller/api/test_api_perf.c dtrain/src/client.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),180,slow,$(API_TEST_DEPS)))
$(eval $(call kd_test,test_api_log,tests/controller/api/test_api_log.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# The launcher's rendezvous through the controller (launcher/chief.c) against the real API.
$(eval $(call kd_test,test_api_chief,tests/controller/api/test_api_chief.c $(API_TEST_SRCS),launch $(API_TEST_KD_LIBS),$(API_TEST_LDLIBS) -ldl,120,,$(API_TEST_DEPS)))
# Routing, body caps and tokens decided from the request head before any body byte is read.
$(eval $(call kd_test,test_api_limits,tests/controller/api/test_api_limits.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# Trial logs: the worker and user routes, following, and kdet-launch's shipper (launcher/logship.c).
$(eval $(call kd_test,test_api_logs,tests/controller/api/test_api_logs.c $(API_TEST_SRCS),launch $(API_TEST_KD_LIBS),$(API_TEST_LDLIBS) -ldl,120,,$(API_TEST_DEPS) $(O)/bin/kdet-launch $(O)/bin/wrap_rank))
# Profiler samples: kind profiling rows read back by group through GET .../trials/{t}/profiler.
$(eval $(call kd_test,test_api_profiler,tests/controller/api/test_api_profiler.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# Users and namespaces: every route of the route table against another user's token.
$(eval $(call kd_test,test_api_authz,tests/controller/api/test_api_authz.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# The request checks that need no database (controller/api/check.c), with fuzz_api's findings.
$(eval $(call kd_test,test_api_check,tests/controller/api/test_api_check.c,$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),30))
# Token text, user and namespace names, namespace decisions (pure), with the fuzz target's checks.
$(eval $(call kd_test,test_api_usertoken,tests/controller/api/test_api_usertoken.c tests/fuzz/fuzz_utoken.c,$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),60))
# The API over HTTPS: trust, refusal, plain HTTP only on 127.0.0.1, libdtrain's and kdet-launch's CA.
$(O)/obj/tests/controller/api/test_api_tls.o: KD_CFLAGS += -Ilauncher
$(eval $(call kd_test,test_api_tls,tests/controller/api/test_api_tls.c dtrain/src/client.c launcher/cacert.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# Tasks: the task token, the address and logs routes, users' routes, the job queue (docs/tasks.md).
$(eval $(call kd_test,test_api_tasks,tests/controller/api/test_api_tasks.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# The task proxy: who gets in, what goes upstream, WebSockets and tunnels (proxy.c).
$(eval $(call kd_test,test_api_proxy,tests/controller/api/test_api_proxy.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),120,,$(API_TEST_DEPS)))
# Checkpoint downloads (controller/api/download.c): tar archives from s3rver, links, refusals.
$(O)/obj/tests/controller/api/test_api_download.o: KD_CFLAGS += -Itests/lib/storage
$(eval $(call kd_test,test_api_download,tests/controller/api/test_api_download.c tests/lib/storage/s3srv.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS) -larchive,180,,$(API_TEST_DEPS)))
