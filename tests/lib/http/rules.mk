# lib/http: request framing, target checks and the pre-body hook against raw-socket clients.
$(eval $(call kd_test,test_http_framing,tests/lib/http/test_http_framing.c,core,-lmicrohttpd -ljansson -lz,90))
# Both real servers (kdet-local, kdet-controller with PostgreSQL) against hostile raw clients.
$(eval $(call kd_test_script,test_http_servers,tests/lib/http/servers.sh,180,,$(O)/bin/kdet-local $(O)/bin/kdet-controller))
