#!/bin/sh
# Slow: examples/fashion-mnist-c on 2 ranks for 4 full epochs must reach 85%
# test accuracy (the same test binary as test_dtrain_fmnist, --full mode).
exec "$KD_BUILD/tests/test_dtrain_fmnist" --full
