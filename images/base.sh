#!/usr/bin/env bash
# images/base.sh NAME: make (or take from the cache) the base layers of
# image NAME from Debian's archive with mmdebstrap, as described by
# images/NAME/base.conf, and print the cache folder that holds them:
#   rootfs.tar    the root file system (the first layer)
#   data.tar      BASE_DATA's files, split off into a layer of their own
#   packages.txt  the Debian packages and versions inside
# A full-style base.conf may define a function base_customize ROOT, run on
# the installed root file system before the layers are written.
# The cache key hashes the recipe (base.conf, this script, slim.py, the
# suite and mirrors) and the archive's date as apt last saw it, so a changed
# package list or a new Debian point release makes a new base.
set -euo pipefail
. "$(dirname "$0")/common.sh"

name="${1:?usage: base.sh NAME}"
conf="$IMAGES_SRC/images/$name/base.conf"
[ -f "$conf" ] || images_die "no $conf"
BASE_SUITE=""
BASE_DATA=""
BASE_KEEP=""
unset -f base_customize
# shellcheck disable=SC1090
. "$conf"
suite="${BASE_SUITE:-$IMAGES_SUITE}"
[ "$BASE_STYLE" = slim ] || [ "$BASE_STYLE" = full ] || images_die "$conf: BASE_STYLE must be slim or full, not '$BASE_STYLE'"

sources=("deb $IMAGES_MIRROR $suite $BASE_COMPONENTS"
	"deb $IMAGES_MIRROR $suite-updates $BASE_COMPONENTS"
	"deb $IMAGES_SECURITY $suite-security $BASE_COMPONENTS")

key=$({
	cat "$conf" "$0" "$IMAGES_SRC/images/slim.py"
	printf '%s\n' "$suite" "${sources[@]}" "uid=$IMAGES_UID"
	IMAGES_SUITE="$suite" images_archive_date
} | sha256sum | cut -c1-16)
dir="$IMAGES_CACHE/base-$name-$key"
if [ -f "$dir/done" ]; then
	images_log "$name: base cached ($dir)"
	printf '%s\n' "$dir"
	exit 0
fi

command -v mmdebstrap > /dev/null || images_die "mmdebstrap is missing: run make images-deps"
mkdir -p "$IMAGES_CACHE"
tmp=$(mktemp -d "$IMAGES_CACHE/.base-$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
epoch=$(images_epoch)
includes=$(printf '%s' "$BASE_PACKAGES" | tr -s ' \n' ',,')

images_log "$name: mmdebstrap $suite ($BASE_COMPONENTS): $BASE_PACKAGES"
images_log "$name: (a cold base takes one to several minutes: download, unpack, configure)"
# No documentation, manual pages, translations or info pages (copyright
# files stay: they are the licences).
mmdebstrap --mode=root --variant=apt --format=directory \
	--include="$includes" \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--aptopt='APT::Install-Recommends "false"' \
	"$suite" "$tmp/root" "${sources[@]}" 2>&1 | sed -u "s/^/[images $name] /" >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || images_die "$name: mmdebstrap failed"

dpkg-query --admindir="$tmp/root/var/lib/dpkg" -W -f='${Package} ${Version}\n' > "$tmp/packages.txt"
images_log "$name: $(wc -l < "$tmp/packages.txt") Debian packages installed"

tarc() { # tarc DIR OUT [tar args]: a reproducible tarball of DIR
	local d="$1" out="$2"
	shift 2
	tar -C "$d" --sort=name --numeric-owner --mtime="@$epoch" --clamp-mtime \
		--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-cf "$out" "$@"
}

root="$tmp/root"
if [ "$BASE_STYLE" = slim ]; then
	images_log "$name: keeping the files of $BASE_KEEP and their dependencies"
	python3 "$IMAGES_SRC/images/slim.py" --uid "$IMAGES_UID" "$tmp/root" "$tmp/slim" $BASE_KEEP
	root="$tmp/slim"
else
	# A user for the trainer to run as, apt's caches and logs gone.
	printf 'kdet:x:%d:%d:kdet:/home/kdet:/bin/sh\n' "$IMAGES_UID" "$IMAGES_UID" >> "$root/etc/passwd"
	printf 'kdet:x:%d:\n' "$IMAGES_UID" >> "$root/etc/group"
	printf 'kdet:*:19000:0:99999:7:::\n' >> "$root/etc/shadow"
	install -d -m 0755 -o "$IMAGES_UID" -g "$IMAGES_UID" "$root/home/kdet"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
		"$root"/var/log/* "$root"/tmp/* "$root"/dev/*
	# A base.conf may define base_customize ROOT (kdet-postgresql's ids).
	if declare -F base_customize > /dev/null; then
		images_log "$name: base_customize"
		base_customize "$root" || images_die "$name: base_customize failed"
	fi
fi

images_log "$name: writing layer tarballs"
if [ -n "$BASE_DATA" ]; then
	[ -d "$root/$BASE_DATA" ] || images_die "$name: BASE_DATA $BASE_DATA is not in the root file system"
	tarc "$root" "$tmp/data.tar" "./$BASE_DATA"
	tarc "$root" "$tmp/rootfs.tar" --exclude="./$BASE_DATA" .
else
	tarc "$root" "$tmp/rootfs.tar" .
fi
rm -rf "$tmp/root" "$tmp/slim"
touch "$tmp/done"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
images_log "$name: base ready: $(du -sh "$dir" | cut -f1) in $dir"
printf '%s\n' "$dir"
