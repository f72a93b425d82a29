# cli/: det, the command line (docs/cli.md).
# The Experiment CRD is built into det, so that --dry-run checks the resource
# exactly as the API server will, wherever det is installed.
$(O)/gen/cli/crd_experiments.c: crds/experiments.yaml
	@mkdir -p $(@D)
	@{ echo '/* Generated from crds/experiments.yaml by cli/rules.mk. */'; \
	   echo '#include <stddef.h>'; \
	   echo 'extern const unsigned char det_crd_experiments[];'; \
	   echo 'extern const size_t det_crd_experiments_len;'; \
	   echo 'const unsigned char det_crd_experiments[] = {'; \
	   xxd -i < $<; \
	   echo ', 0x00};'; \
	   echo 'const size_t det_crd_experiments_len = sizeof(det_crd_experiments) - 1;'; } > $@

# det needs lib/config; a tree without it (mid-merge) simply builds no det.
ifneq ($(wildcard lib/config/rules.mk),)
DET_SRCS := cli/main.c cli/experiment.c $(O)/gen/cli/crd_experiments.c
DET_KD_LIBS := config yaml openapi context core
DET_LDLIBS := -ljansson -lyaml -larchive -lcrypto -lm
DEB_PACKAGES += xxd
$(eval $(call kd_prog,det,$(DET_SRCS),$(DET_KD_LIBS),$(DET_LDLIBS)))
endif
