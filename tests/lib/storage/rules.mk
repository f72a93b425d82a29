# Tests of lib/storage; the s3 ones start a real s3rver (make deps).
STORAGE_TEST_LIBS := storage core
STORAGE_TEST_LD := -lcurl -ljansson -lcrypto -lpthread
$(eval $(call kd_test,test_storage_s3,tests/lib/storage/test_s3.c tests/lib/storage/s3srv.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),240))
# S3 answers read by lib/storage/s3xml.c, with the references the scanner once got wrong.
$(eval $(call kd_test,test_storage_s3xml,tests/lib/storage/test_s3xml.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),30))
$(eval $(call kd_test,test_storage_gc,tests/lib/storage/test_gc.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),30))
$(eval $(call kd_test,test_storage_sigv4,tests/lib/storage/test_sigv4.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),30))
# Which files go up in one PUT and which in parts (lib/storage/s3.c).
$(eval $(call kd_test,test_storage_s3plan,tests/lib/storage/test_s3plan.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),30))
# A checkpoint as a tar stream (lib/storage/ckpt_tar.c) on shared_fs and s3rver, read back by libarchive.
$(eval $(call kd_test,test_storage_ckpt_tar,tests/lib/storage/test_ckpt_tar.c tests/lib/storage/s3srv.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD) -larchive,120))
$(eval $(call kd_test,test_storage_fs,tests/lib/storage/test_fs.c tests/lib/storage/s3srv.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),60))
$(eval $(call kd_test,test_storage_async,tests/lib/storage/test_async.c tests/lib/storage/s3srv.c dtrain/src/checkpoint.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),120))

$(eval $(call kd_test_script,test_storage_ckpt_tool,tests/lib/storage/test_ckpt_tool.sh,120,,$(O)/bin/dtrain))
$(eval $(call kd_test,test_storage_slow,tests/lib/storage/test_slow.c tests/lib/storage/s3srv.c,$(STORAGE_TEST_LIBS),$(STORAGE_TEST_LD),900,slow))
# libFuzzer target (make fuzz): S3's XML answers (lib/storage/s3xml.c), replayed by test_fuzz_s3xml.
$(eval $(call kd_fuzz,fuzz_s3xml,tests/lib/storage/fuzz_s3xml.c $(wildcard lib/storage/*.c lib/core/*.c),-lcurl -ljansson -lcrypto -lpthread,tests/fuzz/corpus/s3xml))
