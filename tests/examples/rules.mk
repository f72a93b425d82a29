# tests/examples: the examples run as kdet trials. test_fmnist_trial starts a private
# PostgreSQL, a real kdet-local and the controller API (the fixtures of tests/controller/api)
# and runs fashion-mnist-c under kdet-launch against them.
$(O)/obj/tests/examples/%.o: KD_CFLAGS += -Itests -Itests/controller/api -iquote controller
$(eval $(call kd_test,test_fmnist_trial,tests/examples/test_fmnist_trial.c $(API_TEST_SRCS),$(API_TEST_KD_LIBS),$(API_TEST_LDLIBS),180,,$(API_TEST_DEPS) $(O)/bin/kdet-launch $(O)/bin/fashion-mnist-c))
$(eval $(call kd_test_script,test_fmnist_resume,tests/examples/fmnist_resume.sh,120,,$(O)/bin/fashion-mnist-c))
