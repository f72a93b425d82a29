# Shared settings for the image scripts in images/: Debian archive, cache
# paths, image names and tags, logging. Sourced, never run.

IMAGES_SRC="${KD_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
IMAGES_BUILD="${KD_BUILD:-$IMAGES_SRC/build}"
IMAGES_OUT="${IMAGES_OUT:-$IMAGES_BUILD/images}"

# The Debian archive the base root file systems come from.
IMAGES_SUITE="${IMAGES_SUITE:-bookworm}"
IMAGES_MIRROR="${IMAGES_MIRROR:-http://deb.debian.org/debian}"
IMAGES_SECURITY="${IMAGES_SECURITY:-http://deb.debian.org/debian-security}"

# Base tarballs and buildah's layer store live outside the work tree, so
# that `make clean` and a fresh clone keep them.
IMAGES_CACHE="${KDET_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdet/images}"
IMAGES_STORE="$IMAGES_CACHE/storage"
IMAGES_RUNROOT="${IMAGES_RUNROOT:-/run/kdet-images/$(id -u)}"

# The uid and gid every image runs as (not root, not an existing Debian id).
IMAGES_UID=65532

# Names as containerd and Docker spell them after normalisation: a pod's
# `image: kdet-controller:TAG` finds docker.io/library/kdet-controller:TAG.
IMAGES_REPO="${IMAGES_REPO:-docker.io/library}"

images_log() { printf '[images %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
images_die() {
	printf '[images] error: %s\n' "$*" >&2
	exit 1
}

# images_tag: the tag every image of this tree gets.
images_tag() {
	local t
	t=$(git -C "$IMAGES_SRC" describe --tags --always --dirty 2>/dev/null) || t=untagged
	printf '%s\n' "$t"
}

# images_epoch: file and image timestamps (the last commit's time), so that
# two builds of one commit make the same layers.
images_epoch() {
	git -C "$IMAGES_SRC" log -1 --format=%ct 2>/dev/null || echo 0
}

# images_packages FILE: the package names in FILE (one a line, # comments).
images_packages() {
	sed -e 's/#.*//' -e 's/[[:space:]]//g' "$1" | grep -v '^$'
}

# images_archive_date: the Date of the suite's Release file as this machine's
# apt last saw it (apt-get update), part of the base cache key: a new point
# release of Debian gives new bases. KDET_IMAGES_DEBIAN_DATE overrides it.
images_archive_date() {
	local f
	if [ -n "${KDET_IMAGES_DEBIAN_DATE:-}" ]; then
		printf '%s\n' "$KDET_IMAGES_DEBIAN_DATE"
		return
	fi
	for f in /var/lib/apt/lists/*_dists_"${IMAGES_SUITE}"_InRelease /var/lib/apt/lists/*_dists_"${IMAGES_SUITE}"_Release; do
		if [ -f "$f" ]; then
			sed -n 's/^Date: //p' "$f" | head -1
			return
		fi
	done
	echo unknown
}

# images_buildah ARGS...: buildah with the private vfs store.
images_buildah() {
	buildah --storage-driver vfs --root "$IMAGES_STORE" --runroot "$IMAGES_RUNROOT" "$@"
}

# images_files_list NAME: the "context-path tree-path" lines of
# images/NAME/files (what the image copies from the build and the tree).
images_files_list() {
	sed -e 's/#.*//' "$IMAGES_SRC/images/$1/files" | awk 'NF == 2 { print $1, $2 }'
}

# images_tree_path P: a tree path of a files list with build/ mapped onto
# the build directory in use.
images_tree_path() {
	case "$1" in
	build/*) printf '%s/%s\n' "$IMAGES_BUILD" "${1#build/}" ;;
	*) printf '%s/%s\n' "$IMAGES_SRC" "$1" ;;
	esac
}

# images_human BYTES: a size in MiB with one decimal.
images_human() {
	awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}
