# launcher/: kdet-launch and wrap_rank (see docs/launcher.md).
LAUNCH_LIB_SRCS := launcher/lines.c launcher/env.c launcher/args.c launcher/supervise.c launcher/context.c \
                   launcher/chief.c launcher/logq.c launcher/logship.c launcher/cacert.c \
                   launcher/ctlapi.c launcher/service.c
$(eval $(call kd_lib,launch,$(LAUNCH_LIB_SRCS)))
$(eval $(call kd_prog,kdet-launch,launcher/kdet_launch.c,launch context storage core,-ljansson -ldl -larchive -lcrypto -lcurl -lpthread))
$(eval $(call kd_prog,wrap_rank,launcher/wrap_rank.c,launch core,-ljansson -ldl))
# The torch_distributed form's end-to-end test runs Debian's PyTorch (CPU, gloo).
DEB_PACKAGES += python3-torch
