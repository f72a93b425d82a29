# TensorBoard event files: CRC32C, and the writer read back by a decoder of its own.
$(eval $(call kd_test,test_tfevents,tests/lib/tfevents/test_tfevents.c,tfevents storage core,-ljansson -lcurl -lcrypto -lpthread -lm,30))
