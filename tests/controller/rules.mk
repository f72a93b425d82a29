# tests/controller: kdet-controller unit tests and the end-to-end suite on kdet-local.
$(O)/obj/tests/controller/%.o: KD_CFLAGS += -Icontroller
$(eval $(call kd_test,test_ctrl_sched,tests/controller/test_ctrl_sched.c,ctrl core,,30))
$(eval $(call kd_test,test_ctrl_podspec,tests/controller/test_ctrl_podspec.c,ctrl config yaml hparams core,-ljansson -lyaml -lm,30))
$(eval $(call kd_test,test_ctrl_states,tests/controller/test_ctrl_states.c,$(CTRL_KD_LIBS),$(CTRL_LDLIBS),30))
