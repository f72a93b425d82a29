# lib/metrics: Prometheus text exposition of counters, gauges and histograms.
$(eval $(call kd_lib,metrics,$(wildcard lib/metrics/*.c)))
DEB_PACKAGES += prometheus # promtool, to check the exposition format in tests
