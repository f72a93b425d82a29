# images/: OCI images of kdet (docs/images.md).
#   make images        kdet-controller, kdet-trainer and kdet-postgresql as OCI archives in $(O)/images/
#   make images-cuda   kdet-trainer-cuda, where a Debian suite with CUDA PyTorch and NCCL is reachable
#   make images-verify run the built images (runc) and import them into a private containerd
#   make images-deps   the Debian tools the three above need (not part of `make deps`)
# `make check` runs test_images (tests/images): the Containerfile linter and
# the consistency of Containerfiles, files lists and base recipes, in seconds.

# Heavy tools only for building and running images: installed by the image
# targets themselves, so that `make deps` (run by CI for every commit) stays
# lean. See docs/images.md.
IMAGES_DEB_PACKAGES := buildah mmdebstrap runc containerd

# The Containerfile linter (npm dockerfile-utils), pinned by the committed
# package.json + package-lock.json, installed into .deps/images-lint.
IMAGES_LINT := .deps/images-lint/node_modules/.bin/dockerfile-utils
DEPS_EXTRA += images-lint-install

# The files of $(O) that the images copy (images/*/files), for make.
IMAGES_BUILD_FILES := $(patsubst build/%,$(O)/%,$(filter build/%,$(shell sed -e 's/\#.*//' images/*/files 2>/dev/null | awk 'NF == 2 { print $$2 }')))
IMAGES_ENV = KD_SRC=$(CURDIR) KD_BUILD=$(abspath $(O))

.PHONY: images images-cuda images-verify images-deps images-lint-install images-clean-cache
images-lint-install:
	@if [ -x $(IMAGES_LINT) ]; then echo "images-lint: already in .deps/images-lint"; else \
	  command -v npm > /dev/null || mk/deps.sh npm || exit 1; \
	  mkdir -p .deps/images-lint && \
	  cp images/lint/package.json images/lint/package-lock.json .deps/images-lint/ && \
	  echo "images-lint: npm ci into .deps/images-lint" && \
	  cd .deps/images-lint && npm ci --no-audit --no-fund; fi

images-deps:
	@mk/deps.sh $(IMAGES_DEB_PACKAGES)

images: images-deps $(sort $(IMAGES_BUILD_FILES))
	@$(IMAGES_ENV) images/build.sh controller trainer postgresql

images-cuda: images-deps $(sort $(IMAGES_BUILD_FILES))
	@$(IMAGES_ENV) images/build.sh trainer-cuda

images-verify: images-deps
	@$(IMAGES_ENV) images/verify.sh

# Drop the cached bases and buildah's store (the next `make images` is cold).
images-clean-cache:
	@. images/common.sh && echo "images: removing $$IMAGES_CACHE" && rm -rf "$$IMAGES_CACHE"
