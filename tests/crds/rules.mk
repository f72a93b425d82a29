$(eval $(call kd_test,test_crds,tests/crds/test_crds.c,openapi yaml core,-ljansson -lyaml -lm,30))
