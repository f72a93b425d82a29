#!/bin/sh
# make bench BENCH=ingest: metric ingest through the API (100 trials, 100-row batches, each
# acknowledged durable) against a raw libpq COPY of the same rows. KD_BENCH_INGEST_TRIALS and
# KD_BENCH_INGEST_BATCHES (per trial) change the load. The API's Kubernetes client runs without
# its rate limit; KD_BENCH_INGEST_KUBE_QPS=50 gives it the controller's default.
cd "$KD_SRC" && exec "$KD_BUILD/bin/kdet-ingest-bench"
