# bench/local: kdet-local throughput, watch latency, memory and pod start latency.
$(eval $(call kd_prog,kdet-local-bench,bench/local/kdlbench.c,core,-ljansson -lcurl -lcrypto))
$(eval $(call kd_bench,local,bench/local/run.sh,$(O)/bin/kdet-local $(O)/bin/kdet-local-bench))
DEB_PACKAGES += etcd-server libcurl4-openssl-dev
