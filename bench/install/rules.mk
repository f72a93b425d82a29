# bench/install: kdet installed by helm on the real nodes of e2e/kube (the
# upstream kubelet on containerd) against kdet-local (det deploy local up):
# controller start -> Ready, experiment create -> first trial container
# Running and -> first worker process running (p50/p95 over
# KDET_BENCH_INSTALL_N one-trial experiments; kdet-local's worker figures
# also against the goal of 1 s), image sizes. The real side needs root and
# `make images`; without them only kdet-local is measured.
$(eval $(call kd_bench,install,bench/install/run.sh,$(O)/bin/det $(O)/bin/kdet-local $(O)/bin/kdet-controller $(O)/bin/kdet-launch $(O)/bin/fashion-mnist-c))
