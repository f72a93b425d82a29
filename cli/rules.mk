# cli/: det, the command line (docs/cli.md).
# The CRDs are built into det, so that --dry-run checks the resource exactly
# as the API server will and `det deploy local up` installs them, wherever
# det is installed.
define det_embed_crd
$(O)/gen/cli/crd_$(1).c: crds/$(1).yaml
	@mkdir -p $$(@D)
	@{ echo '/* Generated from crds/$(1).yaml by cli/rules.mk. */'; \
	   echo '#include <stddef.h>'; \
	   echo 'extern const unsigned char det_crd_$(1)[];'; \
	   echo 'extern const size_t det_crd_$(1)_len;'; \
	   echo 'const unsigned char det_crd_$(1)[] = {'; \
	   xxd -i < $$<; \
	   echo ', 0x00};'; \
	   echo 'const size_t det_crd_$(1)_len = sizeof(det_crd_$(1)) - 1;'; } > $$@
endef
$(eval $(call det_embed_crd,experiments))
$(eval $(call det_embed_crd,trials))

# det needs lib/config; a tree without it (mid-merge) simply builds no det.
ifneq ($(wildcard lib/config/rules.mk),)
DET_SRCS := cli/main.c cli/args.c cli/output.c cli/kube.c cli/experiment.c \
            cli/experiment_ops.c cli/trial.c cli/template.c cli/deploy.c \
            $(O)/gen/cli/crd_experiments.c $(O)/gen/cli/crd_trials.c
DET_KD_LIBS := config k8s yaml openapi context core
DET_LDLIBS := -lcurl -ljansson -lyaml -larchive -lcrypto -lpthread -lm
DEB_PACKAGES += xxd libcurl4-openssl-dev
$(eval $(call kd_prog,det,$(DET_SRCS),$(DET_KD_LIBS),$(DET_LDLIBS)))
endif
