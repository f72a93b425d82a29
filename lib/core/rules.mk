# lib/core: errors, logging, buffers, allocation, time, strings (libc only).
$(eval $(call kd_lib,core,$(wildcard lib/core/*.c)))
