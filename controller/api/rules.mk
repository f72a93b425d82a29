# controller/api: the controller's HTTP API (libkd_api); link with
# api http store k8s tfevents storage yaml core and -lmicrohttpd -lpq -lcurl -lcrypto -ljansson -lyaml -lm.
# The web UI's bundle (ui/rules.mk) is built into it as C arrays, which ui.c serves.
$(eval $(call kd_lib,api,$(wildcard controller/api/*.c) $(O)/gen/ui/assets.c))
DEB_PACKAGES += libmicrohttpd-dev libssl-dev libpq-dev libcurl4-openssl-dev libjansson-dev
