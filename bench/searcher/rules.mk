# bench/searcher: searcher quality, multi-fidelity and speed vs Optuna 3.1.
DEB_PACKAGES += python3-optuna
$(eval $(call kd_bench,searcher,bench/searcher/run.sh,$(O)/bin/kdet-search))
