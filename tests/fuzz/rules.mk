# The libFuzzer target for the YAML reader and the config checks (make fuzz), and a
# replay test that runs the same checks over the regression inputs and the test data.
FUZZ_CONFIG_SRCS := tests/fuzz/fuzz_config.c lib/yaml/yaml.c lib/config/config.c \
                    $(wildcard lib/core/*.c)
$(eval $(call kd_fuzz,fuzz_config,$(FUZZ_CONFIG_SRCS),-ljansson -lyaml -lm))
$(eval $(call kd_test,test_config_fuzz_replay,tests/fuzz/fuzz_config.c tests/fuzz/replay.c,config yaml core,-ljansson -lyaml -lm,120))
$(O)/obj/tests/fuzz/fuzz_utoken.o: KD_CFLAGS += -iquote controller
# The user API token parser (controller/api/usertoken.c); tests/controller/api/test_api_usertoken.c
# replays the same checks over its table of inputs.
$(eval $(call kd_fuzz,fuzz_utoken,tests/fuzz/fuzz_utoken.c controller/api/usertoken.c $(wildcard lib/core/*.c),-iquote controller -lcrypto))
