# Shared settings for the real-control-plane scripts in e2e/kube/: versions,
# cache paths, logging. Sourced, never run.

KUBE_VERSION=v1.20.2
KUBE_DEB_SUITE=bookworm
KUBE_CACHE_ROOT="${KDET_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdet}"
# The build's revision: bumped whenever build.sh changes what it builds, so
# that a cache made by an older build.sh is not taken for a current one.
# 2: custom-resource validation takes "" for a string (see build.sh, stage 2).
KUBE_BUILD_REV=2
KUBE_CACHE="$KUBE_CACHE_ROOT/kube-$KUBE_VERSION-b$KUBE_BUILD_REV"
KUBE_BIN="$KUBE_CACHE/bin"
KUBE_COMPONENTS=(kube-apiserver kube-scheduler kube-controller-manager)

kube_log() { printf '[kube %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
kube_die() { printf '[kube] error: %s\n' "$*" >&2; exit 1; }

# kube_cached: true when all three components are in the cache.
kube_cached() {
	local c
	for c in "${KUBE_COMPONENTS[@]}"; do
		[[ -x "$KUBE_BIN/$c" ]] || return 1
	done
}
