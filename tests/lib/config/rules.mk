$(eval $(call kd_test,test_config,tests/lib/config/test_config.c,config yaml core,-ljansson -lyaml -lm,60))
