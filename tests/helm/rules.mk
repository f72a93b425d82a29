# tests/helm: the chart rendered and checked by the real helm (.deps/helm).
$(eval $(call kd_test_script,test_helm_chart,tests/helm/chart.sh,120,noasan,))
