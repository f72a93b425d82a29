$(eval $(call kd_test,test_yaml,tests/lib/yaml/test_yaml.c,yaml core,-ljansson -lyaml -lm,60))
