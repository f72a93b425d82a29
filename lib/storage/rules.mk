# lib/storage: checkpoint storage (shared_fs, s3), manifests, GC policies.
# Used inside libdtrain, so it links libcurl, jansson and OpenSSL only.
$(eval $(call kd_lib,storage,$(wildcard lib/storage/*.c)))
STORAGE_LDLIBS := -lcurl -ljansson -lcrypto -lpthread
# npm: the machine's own when it has one (Debian's npm conflicts with a
# Node.js installed outside dpkg), else Debian's, installed by s3rver-install.
DEB_PACKAGES += libcurl4-openssl-dev libjansson-dev libssl-dev nodejs awscli rclone

# s3rver (the S3 server the tests and the benchmark start), pinned by the
# committed package.json + package-lock.json, installed into .deps/s3rver.
S3RVER := .deps/s3rver/node_modules/.bin/s3rver
DEPS_EXTRA += s3rver-install
.PHONY: s3rver-install
s3rver-install:
	@if [ -x $(S3RVER) ]; then echo "s3rver: already in .deps/s3rver"; else \
	  command -v npm > /dev/null || mk/deps.sh npm || exit 1; \
	  mkdir -p .deps/s3rver && \
	  cp lib/storage/s3rver/package.json lib/storage/s3rver/package-lock.json .deps/s3rver/ && \
	  echo "s3rver: npm ci into .deps/s3rver" && \
	  cd .deps/s3rver && npm ci --no-audit --no-fund; fi
