# det is driven as a program (fork/exec), its output parsed back and checked
# against the CRD.
$(eval $(call kd_test,test_cli_det,tests/cli/test_det.c tests/cli/run.c,config openapi context yaml core,-ljansson -lyaml -larchive -lcrypto -lm,60,,$(O)/bin/det $(O)/bin/kdet-launch))
$(eval $(call kd_test,test_cli_examples,tests/cli/test_examples.c tests/cli/run.c,openapi yaml core,-ljansson -lyaml -lm,120,,$(O)/bin/det))
# det's error messages (403, 401, 422, unreachable), argument parser and formats, unit-tested.
$(eval $(call kd_test,test_det_errors,tests/cli/test_errors.c cli/kube.c cli/ids.c cli/api.c cli/args.c cli/output.c,k8s yaml core,-lcurl -ljansson -lyaml -lpthread -lm,30,,))
# det | kubectl against kdet-local (the CRDs, every example, an invalid resource).
$(eval $(call kd_test_script,test_cli_kubectl,tests/cli/kubectl.sh,120,,$(O)/bin/det $(O)/bin/kdet-local))
# det's verbs over the Kubernetes API, against kdet-local.
$(eval $(call kd_test_script,test_det_kube,tests/cli/det_kube.sh,180,,$(O)/bin/det $(O)/bin/kdet-local))
# det deploy local up/status/down/up again (kdet-local, a private PostgreSQL, kdet-controller).
$(eval $(call kd_test_script,test_det_deploy,tests/cli/det_deploy.sh,180,,$(O)/bin/det $(O)/bin/kdet-local $(O)/bin/kdet-controller))
# The PyTorch example trains for a few batches (one process, then two ranks).
$(eval $(call kd_test_script,test_cli_pytorch_example,tests/cli/pytorch_example.sh,180,slow noasan))
# det's verbs on kdet-controller's API (trial metrics, checkpoints) and the queue (job list/update,
# gc-policy) against det deploy local up; the user token det finds by itself.
$(eval $(call kd_test_script,test_det_api,tests/cli/det_api.sh,150,,$(O)/bin/det $(O)/bin/kdet-local $(O)/bin/kdet-controller $(O)/bin/kdet-launch $(O)/bin/dtrain))
# det trial list --best N: the ranking by the searcher metric, table-tested.
$(eval $(call kd_test,test_det_best,tests/cli/test_best.c cli/best.c cli/output.c,yaml core,-ljansson -lyaml -lm,30,,))
# det trial logs from the controller's store: how lines print, the server-sent-event parser.
$(eval $(call kd_test,test_det_logs,tests/cli/test_logs.c cli/logs.c cli/verb.c cli/kube.c cli/ids.c cli/api.c cli/args.c cli/output.c,k8s yaml core,-lcurl -ljansson -lyaml -lpthread -lm,30,,))
# det's slots (resource pools, slot types, whether a trial could ever fit), table-tested.
$(eval $(call kd_test,test_det_slots,tests/cli/test_slots.c cli/slots.c cli/verb.c cli/kube.c cli/ids.c cli/api.c cli/args.c cli/output.c,k8s yaml core,-lcurl -ljansson -lyaml -lpthread -lm,30,,))
