# tests/controller/models: the model registry end to end (det, the API, checkpoint GC's protection)
# against kdet-controller on a private PostgreSQL and kdet-local. The programs are named here, not
# through CTRL_E2E_DEPS: tests/controller/rules.mk, which sets it, is read after this file.
$(eval $(call kd_test_script,test_ctrl_e2e_models,tests/controller/models/models.sh,180,,$(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det $(O)/bin/dtrain))
