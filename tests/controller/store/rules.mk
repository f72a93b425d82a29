# Store tests: each program starts its own private PostgreSQL (tests/support/pg.c).
STORE_TEST_SRCS = tests/controller/store/fx.c tests/support/pg.c
STORE_TEST_LIBS = -lpq -ljansson -lpthread -lm
$(O)/obj/tests/controller/store/%.o $(O)/obj/tests/support/%.o: KD_CFLAGS += -Itests -iquote controller
$(eval $(call kd_test,test_store_migrate,tests/controller/store/test_store_migrate.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
# The COPY path: its encoding and batching policy (tables) and one group of mixed batches.
$(eval $(call kd_test,test_store_ingest,tests/controller/store/test_store_ingest.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
# Metric overviews for charts: M4 (tables) and kd_store_metrics_overview against M4 of what was sent.
$(eval $(call kd_test,test_store_sketch,tests/controller/store/test_store_sketch.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
$(eval $(call kd_test,test_store_metrics,tests/controller/store/test_store_metrics.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
$(eval $(call kd_test,test_store_outage,tests/controller/store/test_store_outage.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),180))
$(eval $(call kd_test,test_store_pool,tests/controller/store/test_store_pool.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
$(eval $(call kd_test,test_store_registry,tests/controller/store/test_store_registry.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
# Random kills of the server while four workers stream (bounded, about a minute).
$(eval $(call kd_test,test_store_soak,tests/controller/store/test_store_soak.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),240,slow))
# The model registry: models, versions, what they capture and protect (tests/controller/store/test_store_models.c).
$(eval $(call kd_test,test_store_models,tests/controller/store/test_store_models.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
$(eval $(call kd_test,test_store_logs,tests/controller/store/test_store_logs.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
$(eval $(call kd_test,test_store_users,tests/controller/store/test_store_users.c $(STORE_TEST_SRCS),store metrics core,$(STORE_TEST_LIBS),120))
