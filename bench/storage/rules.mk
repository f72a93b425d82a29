# bench/storage: checkpoint upload/download throughput, kdet against
# `aws s3 cp --recursive` and rclone on the same s3rver, and shared_fs
# against `cp -r` + `sync`. `make bench BENCH=storage`.
$(eval $(call kd_bench,storage,bench/storage/run.sh,$(O)/bin/dtrain))
