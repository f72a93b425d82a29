$(eval $(call kd_test,test_metrics,tests/lib/metrics/test_metrics.c,metrics core,-lm,30))
