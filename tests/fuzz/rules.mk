# libFuzzer targets that live here (make fuzz), each with a replay test over its corpus
# (test_fuzz_*): the YAML reader, the config loader and its templates; the user API token
# parser; the HTTP server's request screening; the controller API's decisions from a request.
FUZZ_CONFIG_SRCS := tests/fuzz/fuzz_config.c $(wildcard lib/yaml/*.c lib/config/*.c) \
                    $(wildcard lib/core/*.c)
FUZZ_CONFIG_CORPUS := tests/fuzz/corpus/config tests/data/yaml tests/data/config/good \
                      tests/data/config/bad tests/data/config/templates
$(eval $(call kd_fuzz,fuzz_config,$(FUZZ_CONFIG_SRCS),-ljansson -lyaml -lm,$(FUZZ_CONFIG_CORPUS),,tests/fuzz/yaml.dict))
# The user API token parser (controller/api/usertoken.c); tests/controller/api/test_api_usertoken.c
# replays the same checks over its table of inputs.
$(eval $(call kd_fuzz,fuzz_utoken,tests/fuzz/fuzz_utoken.c controller/api/usertoken.c $(wildcard lib/core/*.c),-lcrypto,tests/fuzz/corpus/utoken,-iquote controller))
# The controller API's request checks (controller/api/check.c): routes, bearer tokens, body
# caps and the worker and user routes' JSON bodies, without a database.
FUZZ_API_SRCS := tests/fuzz/fuzz_api.c controller/api/check.c controller/api/usertoken.c lib/k8s/jobupdate.c \
                 $(wildcard controller/store/*.c lib/metrics/*.c lib/storage/*.c lib/core/*.c)
$(eval $(call kd_fuzz,fuzz_api,$(FUZZ_API_SRCS),-lpq -lcurl -lcrypto -ljansson -lm -lpthread,tests/fuzz/corpus/api,-iquote controller))
# lib/http's screening of a connection's bytes: the request line, the head's framing, the target.
$(eval $(call kd_fuzz,fuzz_http,tests/fuzz/fuzz_http.c $(wildcard lib/core/*.c),-lmicrohttpd -ljansson -lpthread -lz,tests/fuzz/corpus/http))
