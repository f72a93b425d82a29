# lib/context: model context directories (.detignore, deterministic tar.gz, safe unpack).
# Link with: -larchive -lcrypto
$(eval $(call kd_lib,context,$(wildcard lib/context/*.c)))
