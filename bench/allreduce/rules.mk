# bench/allreduce: dtrain allreduce vs OpenMPI MPI_Allreduce (`make bench BENCH=allreduce`).
DEB_PACKAGES += openmpi-bin libopenmpi-dev
$(eval $(call kd_bench,allreduce,bench/allreduce/run.sh,$(O)/bin/dtrain))
