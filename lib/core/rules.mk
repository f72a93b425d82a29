# lib/core: errors, logging, buffers, allocation, time, strings, a parallel loop (libc only).
$(eval $(call kd_lib,core,$(wildcard lib/core/*.c)))
