# dtrain/: libdtrain (rendezvous, collectives over tcp / shm / NCCL, gradient
# buckets) and the dtrain tool.
#   $(O)/lib/libkd_dtrain.a  the objects, for kd_prog/kd_test link lines
#   $(O)/lib/libdtrain.a     self-contained archive for users (dtrain + kd deps)
#   $(O)/lib/libdtrain.so    shared library exporting only dtrain_* symbols
DTRAIN_SRCS := $(wildcard dtrain/src/*.c)
DTRAIN_KD_LIBS := dtrain storage core
DTRAIN_LDLIBS := -lcurl -lcrypto -ljansson -lpthread -ldl -lm
DTRAIN_DEP_SRCS := $(wildcard lib/core/*.c) $(wildcard lib/storage/*.c)
DTRAIN_ALL_OBJS = $(call kd_objs,$(DTRAIN_SRCS) $(DTRAIN_DEP_SRCS))

$(eval $(call kd_lib,dtrain,$(DTRAIN_SRCS)))

$(O)/lib/libdtrain.a: $(call kd_objs,$(DTRAIN_SRCS) $(DTRAIN_DEP_SRCS))
	@mkdir -p $(@D)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)$(AR) rcs $@ $^

$(O)/lib/libdtrain.so: $(call kd_objs,$(DTRAIN_SRCS) $(DTRAIN_DEP_SRCS)) dtrain/src/libdtrain.map
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(KD_LDFLAGS) -shared -Wl,-soname,libdtrain.so \
	  -Wl,--version-script=dtrain/src/libdtrain.map $(if $(SANITIZE),,-Wl,--no-undefined) \
	  -o $@ $(filter %.o,$^) $(DTRAIN_LDLIBS)

ALL_LIBS += $(O)/lib/libdtrain.a $(O)/lib/libdtrain.so

# The dtrain tool: bench, check and ckpt (docs/dtrain.md, docs/checkpoints.md).
DTRAIN_TOOL_SRCS := $(wildcard dtrain/tool/*.c)
$(eval $(call kd_prog,dtrain,$(DTRAIN_TOOL_SRCS),$(DTRAIN_KD_LIBS),$(DTRAIN_LDLIBS)))

# The Python package (kdet, and determined: its second name), staged as
# $(O)/lib/python, where kdet-launch ($(O)/bin) puts it on the workers'
# PYTHONPATH (docs/python.md).
PY_PKG_SRCS := $(wildcard dtrain/python/kdet/*.py dtrain/python/kdet/*/*.py \
                 dtrain/python/determined/*.py dtrain/python/determined/*/*.py)
$(O)/lib/python/%.py: dtrain/python/%.py
	@mkdir -p $(@D)
	$(Q)cp $< $@
PY_PKG_OUT := $(patsubst dtrain/python/%,$(O)/lib/python/%,$(PY_PKG_SRCS))
ALL_LIBS += $(PY_PKG_OUT)
