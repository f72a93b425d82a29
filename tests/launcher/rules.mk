# Tests of launcher/: unit tests of its parts, then the programs end to end.
$(eval $(call kd_test,test_launch_lines,tests/launcher/test_lines.c,launch core,,30))
$(eval $(call kd_test,test_launch_logq,tests/launcher/test_logq.c,launch core,-ljansson,30))
$(eval $(call kd_test,test_launch_env,tests/launcher/test_env.c,launch core,-ljansson -ldl,30))
$(eval $(call kd_test,test_launch_args,tests/launcher/test_args.c,launch core,-ljansson -ldl,30))
$(eval $(call kd_test_script,test_launch_procs,tests/launcher/test_procs.sh,180,,$(O)/bin/kdet-launch $(O)/bin/wrap_rank))
$(eval $(call kd_test_script,test_launch_torch,tests/launcher/test_torch.sh,240,slow noasan,$(O)/bin/kdet-launch $(O)/bin/wrap_rank))
$(eval $(call kd_test_script,test_launch_port,tests/launcher/test_port.sh,120,,$(O)/bin/kdet-launch $(O)/bin/dtrain))
$(eval $(call kd_test,test_launch_context,tests/launcher/test_context.c tests/lib/storage/s3srv.c,launch context storage core,-ljansson -ldl -larchive -lcrypto -lcurl -lpthread,60))
