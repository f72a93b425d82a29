#!/bin/bash
# Provides kube-apiserver, kube-scheduler and kube-controller-manager for the
# real-control-plane e2e tests (or, with --node, kubelet and kube-proxy for the
# real-node suite), built from Debian bookworm's `kubernetes`
# source package (upstream v1.20.2 with vendor/) into a per-version cache
# outside the work tree. Does nothing when the cache is complete.
#
# Usage: e2e/kube/build.sh [--node | --all] [--print-bin]
#   --node            build kubelet and kube-proxy instead (for the real-node
#                     suite, e2e/kube/realnode.sh) into their own cache entry,
#                     kube-node-v1.20.2-b1/bin, from the same source and patches
#   --all             both sets, in one pass over one source tree: the packages
#                     they share (client-go, apimachinery, the API types) are
#                     compiled once, so a cold --all costs about a third more
#                     than the control plane alone instead of twice as much;
#                     each set still goes into its own cache entry
#   KDET_KUBE_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/kdet)
#   KDET_KUBE_KEEP_WORK=1  keep the source tree and Go build cache afterwards
#
# Stages (each resumable after a failure; the work dir is kept until success):
#   1. apt-get source kubernetes through a private apt configuration (its own
#      sources.list with the deb-src line, lists and cache dirs; /etc/apt is
#      never touched)
#   2. replace vendored modern-go/reflect2 and json-iterator/go with Debian's
#      -dev package sources (the vendored ones crash on Go >= 1.18 when a
#      custom resource is created), and patch the OpenAPI type validator
#      so that custom resources may hold "" in a string field (upstream
#      kube-openapi#230, in Kubernetes 1.21: built with Go >= 1.16, 1.20's
#      validator takes every "" for null and rejects it with `must be of
#      type string: "null"`)
#   3. make gen_openapi (else: undefined: openapi.GetOpenAPIDefinitions)
#   4. hack/make-rules/build.sh in GOPATH mode, CGO off, no network
#   5. copy the binaries into a temp dir next to the cache and rename it into
#      place, so a half-finished build is never taken for a cached one
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"

print_bin=0 all=0
for arg in "$@"; do
	case "$arg" in
	--print-bin) print_bin=1 ;;
	--node) kube_select_node ;;
	--all) all=1 ;;
	*) kube_die "usage: e2e/kube/build.sh [--node | --all] [--print-bin]" ;;
	esac
done
# --all: one build of whichever sets are missing. When only one is, this is
# the plain build of that set.
if ((all)); then
	cp_missing=0 node_missing=0
	kube_cached || cp_missing=1
	(kube_select_node && kube_cached) || node_missing=1
	if ((cp_missing && node_missing)); then
		KUBE_COMPONENTS+=("${KUBE_NODE_COMPONENTS[@]}")
	elif ((node_missing)); then
		kube_select_node
	fi
fi

done_msg() {
	if ((print_bin)); then echo "$KUBE_BIN"; fi
}

if kube_cached; then
	kube_log "using cached $KUBE_VERSION build in $KUBE_BIN"
	done_msg
	exit 0
fi

GO_DIR=/usr/lib/go-1.19/bin
DEB_DEPS=(golang-1.19-go rsync golang-github-modern-go-reflect2-dev
	golang-github-json-iterator-go-dev etcd-server etcd-client openssl dpkg-dev jq)

mkdir -p "$KUBE_CACHE_ROOT"
# One build at a time (control plane or node): a second caller waits.
exec 9>"$KUBE_BUILD_LOCK"
if ! flock -n 9; then
	kube_log "another build of $KUBE_VERSION is running; waiting for it (up to 3 h)..."
	flock -w 10800 9 || kube_die "timed out waiting for the lock on $KUBE_BUILD_LOCK"
fi
if kube_cached; then
	kube_log "using cached $KUBE_VERSION build in $KUBE_BIN"
	done_msg
	exit 0
fi

t0=$(date +%s)
stage_t=$t0
stage() {
	local now
	now=$(date +%s)
	kube_log "$* (previous stage $((now - stage_t)) s, total $((now - t0)) s)"
	stage_t=$now
}

# --- packages -------------------------------------------------------------
kube_apt_install "${DEB_DEPS[@]}"
[[ -x "$GO_DIR/go" ]] || kube_die "$GO_DIR/go missing (golang-1.19-go)"

work="$KUBE_CACHE.work"
mkdir -p "$work"

# --- 1. source ------------------------------------------------------------
src=""
find_src() { src="$(find "$work/src" -maxdepth 1 -type d -name 'kubernetes-*' 2>/dev/null | head -n1 || true)"; }
find_src
if [[ -z "$src" || ! -f "$work/.stamp-source" ]]; then
	stage "fetching the kubernetes source package ($KUBE_DEB_SUITE) through a private apt configuration..."
	rm -rf "$work/src" "$work/apt"
	apt_dir="$work/apt"
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d" "$work/src"
	echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $KUBE_DEB_SUITE main" \
		>"$apt_dir/sources.list"
	apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
		-o "Dir::Etc::sourceparts=$apt_dir/sources.list.d"
		-o "Dir::State::Lists=$apt_dir/lists"
		-o "Dir::Cache=$apt_dir/cache"
		-o "APT::Sandbox::User=$(id -un)")
	apt-get -q "${apt_opts[@]}" update >"$work/apt-update.log" 2>&1 ||
		{ cat "$work/apt-update.log" >&2; kube_die "apt-get update (private config) failed"; }
	(cd "$work/src" && apt-get -q "${apt_opts[@]}" source kubernetes) >"$work/apt-source.log" 2>&1 ||
		{ tail -20 "$work/apt-source.log" >&2; kube_die "apt-get source kubernetes failed"; }
	find_src
	[[ -n "$src" ]] || kube_die "apt-get source left no kubernetes-* directory in $work/src"
	grep -q "tag: $KUBE_VERSION'" "$src/hack/lib/version.sh" ||
		kube_die "the source package is not upstream $KUBE_VERSION (see $src/hack/lib/version.sh)"
	rm -f "$work"/.stamp-*
	touch "$work/.stamp-source"
fi

# --- 2. vendored packages -------------------------------------------------
if [[ ! -f "$work/.stamp-vendor" ]]; then
	stage "replacing vendored modern-go/reflect2 and json-iterator/go with Debian's sources..."
	gocode=/usr/share/gocode/src/github.com
	for pkg in modern-go/reflect2 json-iterator/go; do
		[[ -d "$gocode/$pkg" ]] || kube_die "$gocode/$pkg missing"
		rm -rf "${src:?}/vendor/github.com/$pkg"
		cp -rL "$gocode/$pkg" "$src/vendor/github.com/$pkg"
		# Their tests and go.mod files mean nothing inside vendor/.
		find "$src/vendor/github.com/$pkg" \( -name '*_test.go' -o -name go.mod -o -name go.sum \) -delete
	done
	touch "$work/.stamp-vendor"
fi
if [[ ! -f "$work/.stamp-zerofix" ]]; then
	# reflect.DeepEqual on two reflect.Values compares their internals; since
	# Go 1.16 reflect.Zero shares one zero buffer with the runtime's "", so the
	# check is true for every empty string. Upstream dropped it (kube-openapi#230).
	stage "patching the OpenAPI type validator to accept \"\" in custom resources..."
	zcheck='data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))'
	mapfile -t zfiles < <(grep -rlF "$zcheck" "$src/vendor" "$src/staging" 2>/dev/null || true)
	((${#zfiles[@]})) || kube_die "the zero-value check of the OpenAPI type validator was not found under $src/vendor"
	for f in "${zfiles[@]}"; do
		sed -i "s/$(printf '%s' "$zcheck" | sed 's/[].[*^$/]/\\&/g')/data == nil/" "$f"
		! grep -qF "$zcheck" "$f" || kube_die "could not patch $f"
		kube_log "patched $f"
	done
	touch "$work/.stamp-zerofix"
fi

# The build environment: GOPATH mode, no network, no cgo, low priority.
export PATH="$GO_DIR:$PATH"
export GO111MODULE=off GOPROXY=off GOFLAGS= CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
if ((GOMAXPROCS > 2)); then GOMAXPROCS=2; fi
export HOME_BUILD="$work/home"
mkdir -p "$HOME_BUILD" "$work/gocache" "$src/_output/local/go"
# Keep the Go build cache outside the source tree so a failed build resumes.
[[ "$(readlink "$src/_output/local/go/cache" || true)" == "$work/gocache" ]] ||
	ln -sfn "$work/gocache" "$src/_output/local/go/cache"
nice_cmd=(nice -n 19)
command -v ionice >/dev/null && nice_cmd+=(ionice -c3)

# --- 3. OpenAPI definitions -----------------------------------------------
if [[ ! -f "$work/.stamp-openapi" ]]; then
	stage "generating OpenAPI definitions (make gen_openapi; builds openapi-gen and scans the tree)..."
	(cd "$src" && HOME="$HOME_BUILD" "${nice_cmd[@]}" make gen_openapi) >"$work/gen_openapi.log" 2>&1 ||
		{ tail -30 "$work/gen_openapi.log" >&2; kube_die "make gen_openapi failed (log: $work/gen_openapi.log)"; }
	[[ -f "$src/pkg/generated/openapi/zz_generated.openapi.go" ]] ||
		kube_die "make gen_openapi did not write pkg/generated/openapi/zz_generated.openapi.go"
	touch "$work/.stamp-openapi"
fi

# --- 4. build -------------------------------------------------------------
stage "building ${KUBE_COMPONENTS[*]} (cold: ~15 min on 2 idle cores, much longer on a loaded machine; log: $work/build.log)..."
(cd "$src" && HOME="$HOME_BUILD" KUBE_VERBOSE=2 KUBE_BUILD_PLATFORMS= \
	"${nice_cmd[@]}" hack/make-rules/build.sh "${KUBE_COMPONENTS[@]/#/cmd/}") >"$work/build.log" 2>&1 ||
	{ tail -30 "$work/build.log" >&2; kube_die "build failed (log: $work/build.log)"; }

# --- 5. install atomically ------------------------------------------------
# install CACHE_DIR COMPONENT...: copy the built COMPONENTs into CACHE_DIR/bin
# through a temp dir renamed into place.
install_set() {
	local cache=$1 c f tmp_bin
	shift
	stage "installing $* into $cache/bin..."
	tmp_bin="$(mktemp -d "$cache.bin.XXXXXX")"
	for c in "$@"; do
		f="$(find "$src/_output/local/bin" -type f -name "$c" | head -n1)"
		[[ -n "$f" ]] || { rm -rf "$tmp_bin"; kube_die "$c was not built (see $work/build.log)"; }
		cp "$f" "$tmp_bin/$c"
		chmod 755 "$tmp_bin/$c"
	done
	"$tmp_bin/$1" --version >"$tmp_bin/VERSION" 2>&1 || true
	chmod 755 "$tmp_bin"
	mkdir -p "$cache"
	rm -rf "$cache/bin.old"
	[[ -e "$cache/bin" ]] && mv "$cache/bin" "$cache/bin.old"
	mv "$tmp_bin" "$cache/bin"
	rm -rf "$cache/bin.old"
	printf 'built %s (%s) in %d s on %s (%d cores, load %s)\n' "$KUBE_VERSION" "${KUBE_COMPONENTS[*]}" \
		"$(($(date +%s) - t0))" "$(date -u +%FT%TZ)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
		>>"$cache/build-times.txt"
}
if [[ " ${KUBE_COMPONENTS[*]} " == *" kube-apiserver "* ]]; then
	install_set "$KUBE_CACHE" kube-apiserver kube-scheduler kube-controller-manager
fi
if [[ " ${KUBE_COMPONENTS[*]} " == *" kubelet "* ]]; then
	install_set "$KUBE_NODE_CACHE" "${KUBE_NODE_COMPONENTS[@]}"
fi
total=$(($(date +%s) - t0))
stage "built $KUBE_VERSION (${KUBE_COMPONENTS[*]}) in $total s"

if [[ "${KDET_KUBE_KEEP_WORK:-0}" != 1 ]]; then
	kube_log "removing the work tree $work (KDET_KUBE_KEEP_WORK=1 keeps it)"
	rm -rf "$work"
fi
done_msg
