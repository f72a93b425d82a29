#!/bin/sh
# make bench BENCH=searcher: kdet's searchers vs Optuna 3.1 (quality, multi-fidelity, speed).
# Debian's python3-optuna installs for /usr/bin/python3, so call that interpreter explicitly.
exec /usr/bin/python3 "$KD_SRC/bench/searcher/bench.py" "$KD_BUILD/bin/kdet-search" "$@"
