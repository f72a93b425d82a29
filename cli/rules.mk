# cli/: det, the command line (docs/cli.md).
# The CRDs (and the PriorityClasses of manifests/) are built into det, so that --dry-run checks the resource exactly
# as the API server will and `det deploy local up` installs them, wherever
# det is installed.
# $(call det_embed,SYMBOL,FILE): FILE's bytes as det_SYMBOL[] (NUL-terminated)
# and det_SYMBOL_len, generated into $(O)/gen/cli/SYMBOL.c.
define det_embed
$(O)/gen/cli/$(1).c: $(2)
	@mkdir -p $$(@D)
	@{ echo '/* Generated from $(2) by cli/rules.mk. */'; \
	   echo '#include <stddef.h>'; \
	   echo 'extern const unsigned char det_$(1)[];'; \
	   echo 'extern const size_t det_$(1)_len;'; \
	   echo 'const unsigned char det_$(1)[] = {'; \
	   xxd -i < $$<; \
	   echo ', 0x00};'; \
	   echo 'const size_t det_$(1)_len = sizeof(det_$(1)) - 1;'; } > $$@
endef
$(eval $(call det_embed,crd_experiments,crds/experiments.yaml))
$(eval $(call det_embed,crd_trials,crds/trials.yaml))
$(eval $(call det_embed,crd_tasks,crds/tasks.yaml))
$(eval $(call det_embed,priorityclasses,manifests/priorityclasses.yaml))

DET_SRCS := cli/main.c cli/args.c cli/output.c cli/kube.c cli/experiment.c \
            cli/experiment_ops.c cli/trial.c cli/template.c cli/deploy.c \
            cli/verb.c cli/api.c cli/ids.c cli/best.c cli/metrics.c cli/profiler.c cli/slots.c cli/checkpoint.c cli/job.c cli/logs.c cli/user.c cli/task.c cli/shell.c cli/model.c \
            $(O)/gen/cli/crd_experiments.c $(O)/gen/cli/crd_trials.c $(O)/gen/cli/crd_tasks.c \
            $(O)/gen/cli/priorityclasses.c
DET_KD_LIBS := config hparams storage k8s yaml openapi context http core
DET_LDLIBS := -lcurl -ljansson -lyaml -larchive -lcrypto -lpthread -lm
DEB_PACKAGES += xxd libcurl4-openssl-dev
$(eval $(call kd_prog,det,$(DET_SRCS),$(DET_KD_LIBS),$(DET_LDLIBS)))
