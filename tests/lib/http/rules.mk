# lib/http: request framing, target checks and the pre-body hook against raw-socket clients.
$(eval $(call kd_test,test_http_framing,tests/lib/http/test_http_framing.c,core,-lmicrohttpd -ljansson,90))
