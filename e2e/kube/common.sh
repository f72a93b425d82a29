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
# The node components (kubelet, kube-proxy) for the real-node suite, from the
# same source and patches, in their own cache entry: building them changes
# nothing in the control plane's. Bumped like KUBE_BUILD_REV.
KUBE_NODE_BUILD_REV=1
KUBE_NODE_CACHE="$KUBE_CACHE_ROOT/kube-node-$KUBE_VERSION-b$KUBE_NODE_BUILD_REV"
KUBE_NODE_BIN="$KUBE_NODE_CACHE/bin"
KUBE_NODE_COMPONENTS=(kubelet kube-proxy)
# One Kubernetes build at a time on the machine, whichever components: both
# builds take the control plane's lock file.
KUBE_BUILD_LOCK="$KUBE_CACHE.lock"

kube_log() { printf '[kube %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
kube_die() { printf '[kube] error: %s\n' "$*" >&2; exit 1; }

# kube_select_node: make KUBE_CACHE, KUBE_BIN and KUBE_COMPONENTS those of
# the node build (build.sh --node).
kube_select_node() {
	KUBE_CACHE="$KUBE_NODE_CACHE"
	KUBE_BIN="$KUBE_NODE_BIN"
	KUBE_COMPONENTS=("${KUBE_NODE_COMPONENTS[@]}")
}

# kube_apt_install PKG...: install the Debian packages among PKG that are
# missing (as root, or through sudo), retrying while dpkg's lock is busy.
kube_apt_install() {
	local p missing=() sudo_cmd=() ok=0
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	((${#missing[@]})) || return 0
	kube_log "installing Debian packages: ${missing[*]}"
	if ((EUID != 0)); then
		command -v sudo >/dev/null || kube_die "need root (or sudo) to install: ${missing[*]}"
		sudo_cmd=(sudo)
	fi
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		if "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -q --no-install-recommends "${missing[@]}"; then
			ok=1
			break
		fi
		kube_log "apt-get install failed (dpkg lock busy?); retrying in 15 s"
		sleep 15
	done
	((ok)) || kube_die "could not install ${missing[*]}"
}

# kube_free_port USED_FILE: a TCP port on 127.0.0.1 nobody listens on right
# now and not handed out before (recorded in USED_FILE).
kube_free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			grep -qx "$p" "$1" 2>/dev/null && continue
			echo "$p" >>"$1"
			echo "$p"
			return 0
		fi
	done
	kube_die "no free port found"
}

# kube_cached: true when all the selected components are in the cache.
kube_cached() {
	local c
	for c in "${KUBE_COMPONENTS[@]}"; do
		[[ -x "$KUBE_BIN/$c" ]] || return 1
	done
}
