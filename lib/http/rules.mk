# lib/http: libmicrohttpd wrapper (per-request arena, body caps, JSON, chunked streams) and
# self-signed serving certificates (OpenSSL: link -lcrypto).
$(eval $(call kd_lib,http,$(wildcard lib/http/*.c)))
DEB_PACKAGES += libmicrohttpd-dev libjansson-dev libssl-dev
