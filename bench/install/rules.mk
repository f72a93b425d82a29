# bench/install: kdet installed by helm on the real nodes of e2e/kube (the
# upstream kubelet on containerd) against kdet-local (det deploy local up):
# controller start -> Ready, experiment create -> first trial container
# Running (p50/p95 over KDET_BENCH_INSTALL_N one-trial experiments), image
# sizes. Needs root and `make images` (the real-node side).
$(eval $(call kd_bench,install,bench/install/run.sh,$(O)/bin/det $(O)/bin/kdet-local $(O)/bin/kdet-controller $(O)/bin/kdet-launch $(O)/bin/fashion-mnist-c))
