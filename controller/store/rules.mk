# controller/store: the controller's PostgreSQL store (libkd_store); link with -lpq -ljansson.
$(eval $(call kd_lib,store,$(wildcard controller/store/*.c)))
