# The experiment context delivered into trial pods, end to end on kdet-local (e2e/controller/context.sh).
CTRL_CONTEXT_E2E_DEPS := $(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det
$(eval $(call kd_test_script,test_ctrl_e2e_context,e2e/controller/context.sh,300,,$(CTRL_CONTEXT_E2E_DEPS)))
