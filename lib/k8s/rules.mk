# lib/k8s: the Kubernetes client (config, REST, watch, informers, work queue, leader election).
DEB_PACKAGES += libcurl4-openssl-dev libjansson-dev libyaml-dev uthash-dev openssl zlib1g-dev
$(eval $(call kd_lib,k8s,$(wildcard lib/k8s/*.c)))
