# tests/controller/models: the model registry end to end (det, the API, checkpoint GC's protection)
# against kdet-controller on a private PostgreSQL and kdet-local.
$(eval $(call kd_test_script,test_ctrl_e2e_models,tests/controller/models/models.sh,180,,$(CTRL_E2E_DEPS) $(O)/bin/dtrain $(O)/bin/det))
