# bench/ingest: metric ingest through the controller's API (100 trials at once, each batch
# acknowledged durable) against a raw libpq COPY into a table with the same indexes.
$(O)/obj/bench/ingest/%.o: KD_CFLAGS += -iquote controller -Icontroller -Itests -Itests/controller/api
$(eval $(call kd_prog,kdet-ingest-bench,bench/ingest/ingest.c tests/controller/api/fx.c tests/support/pg.c tests/lib/k8s/kdet_local.c,api http store metrics k8s tfevents storage yaml core,-lmicrohttpd -lpq -lcurl -lcrypto -ljansson -lyaml -lm -lpthread -lcmocka))
$(eval $(call kd_bench,ingest,bench/ingest/run.sh,$(O)/bin/kdet-ingest-bench $(O)/bin/kdet-local))
