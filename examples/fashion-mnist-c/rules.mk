# examples/fashion-mnist-c: an MLP trained data-parallel through libdtrain.
DEB_PACKAGES += libopenblas-dev zlib1g-dev dataset-fashion-mnist
FMNIST_SRCS := $(wildcard examples/fashion-mnist-c/*.c)
$(eval $(call kd_prog,fashion-mnist-c,$(FMNIST_SRCS),$(DTRAIN_KD_LIBS),$(DTRAIN_LDLIBS) -lopenblas -lz -lm))
