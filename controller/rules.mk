# controller/: kdet-controller (reconcilers, scheduler, pod generation).
# Only the controller's own sources and tests see its headers (lib/ cannot include them).
$(O)/obj/controller/%.o: KD_CFLAGS += -iquote controller
CTRL_LIB_SRCS := controller/ctrl.c controller/scheduler.c controller/podspec.c controller/states.c \
                 controller/experiment.c controller/trial.c controller/schedloop.c \
                 controller/wire.c controller/gc.c controller/gcview.c controller/gang.c \
                 controller/gang_volcano.c controller/gang_kueue.c controller/handoff.c \
                 controller/capacity.c controller/task.c controller/taskstate.c \
                 controller/taskprobe.c controller/sshkeys.c controller/tensorboard.c
CTRL_LIB_SRCS += controller/defaults.c controller/metrics.c controller/events.c controller/statecm.c
$(eval $(call kd_lib,ctrl,$(CTRL_LIB_SRCS)))
CTRL_KD_LIBS := ctrl api http store metrics tfevents storage searcher hparams config k8s yaml core
CTRL_LDLIBS := -lmicrohttpd -lpq -lcurl -lcrypto -ljansson -lyaml -lm
$(eval $(call kd_prog,kdet-controller,controller/main.c,$(CTRL_KD_LIBS),$(CTRL_LDLIBS)))
