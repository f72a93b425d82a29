$(eval $(call kd_test,test_config,tests/lib/config/test_config.c,config yaml core,-ljansson -lyaml -lm,60))
$(eval $(call kd_test,test_config_crd,tests/lib/config/test_config_crd.c,config openapi yaml core,-ljansson -lyaml -lm,60))
$(eval $(call kd_test,test_k8smap,tests/lib/config/test_k8smap.c,config core,,30))
$(eval $(call kd_test,test_config_task,tests/lib/config/test_config_task.c,config yaml core,-ljansson -lyaml -lm,30))
