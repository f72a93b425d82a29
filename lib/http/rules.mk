# lib/http: libmicrohttpd wrapper (per-request arena, body caps, JSON, chunked streams).
$(eval $(call kd_lib,http,$(wildcard lib/http/*.c)))
DEB_PACKAGES += libmicrohttpd-dev libjansson-dev
