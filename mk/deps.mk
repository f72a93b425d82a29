# Debian packages every part of kdet needs to build and test. Modules add
# their own with `DEB_PACKAGES += ...` in their rules.mk, and extra install
# steps (npm tools) with `DEPS_EXTRA += target`.
DEB_PACKAGES += make gcc clang pkg-config git ca-certificates clang-format \
                libcmocka-dev libjansson-dev libyaml-dev libssl-dev \
                libcurl4-openssl-dev libmicrohttpd-dev libarchive-dev libpq-dev \
                uthash-dev libclang-rt-14-dev postgresql jq ccache
