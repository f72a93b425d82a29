#!/usr/bin/env bash
# images/build.sh NAME...: build the OCI images NAME (controller, trainer,
# trainer-cuda) with buildah from images/NAME/Containerfile, on the base
# layers of images/base.sh and the files that images/NAME/files lists, and
# write each as build/images/kdet-NAME-TAG.oci.tar (OCI layout plus a Docker
# manifest.json: `ctr images import`, `docker load` and `kind load
# image-archive` all take it). TAG is `git describe --tags --always --dirty`.
# Run as root (buildah's vfs store, mmdebstrap's root mode).
set -euo pipefail
. "$(dirname "$0")/common.sh"

[ $# -gt 0 ] || images_die "usage: build.sh NAME..."
[ "$(id -u)" -eq 0 ] || images_die "building images needs root (mmdebstrap --mode=root, buildah's store)"
command -v buildah > /dev/null || images_die "buildah is missing: run make images-deps"
tag=$(images_tag)
epoch=$(images_epoch)
mkdir -p "$IMAGES_OUT" "$IMAGES_STORE" "$IMAGES_RUNROOT"
summary="$IMAGES_OUT/images.txt"

for name in "$@"; do
	[ -f "$IMAGES_SRC/images/$name/Containerfile" ] || images_die "no image $name (no images/$name/Containerfile)"
	image="kdet-$name"
	ref="$IMAGES_REPO/$image:$tag"
	start=$(date +%s)
	images_log "$image: [1/4] base layers"

	# The files first: a missing binary should stop the build before the
	# slow base is made.
	while read -r ctx src; do
		[ -e "$(images_tree_path "$src")" ] || images_die "$image: $src is missing (run make -j2 first)"
	done < <(images_files_list "$name")
	base=$("$IMAGES_SRC/images/base.sh" "$name")

	images_log "$image: [2/4] build context"
	ctxdir="$IMAGES_OUT/ctx/$name"
	rm -rf "$ctxdir"
	mkdir -p "$ctxdir"
	for f in rootfs.tar data.tar; do
		[ -f "$base/$f" ] || continue
		ln "$base/$f" "$ctxdir/$f" 2> /dev/null || cp "$base/$f" "$ctxdir/$f"
	done
	while read -r ctx src; do
		mkdir -p "$(dirname "$ctxdir/$ctx")"
		if [ -d "$(images_tree_path "$src")" ]; then
			mkdir -p "$ctxdir/$ctx"
			tar -C "$(images_tree_path "$src")" --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$ctxdir/$ctx" -xf -
		else
			cp "$(images_tree_path "$src")" "$ctxdir/$ctx"
		fi
	done < <(images_files_list "$name")
	# Owned by root, not writable by the user the image runs as.
	chown -R 0:0 "$ctxdir/kdet"
	chmod -R go-w,a+rX "$ctxdir/kdet"
	find "$ctxdir/kdet" -type d -exec chmod 0755 {} +

	# Nothing to do when this tag's archive was made from the same inputs.
	out="$IMAGES_OUT/$image-$tag.oci.tar"
	inputs=$({
		printf '%s\n' "$base" "$ref" "$epoch"
		cat "$IMAGES_SRC/images/$name/Containerfile" "$IMAGES_SRC/images/archive.py"
		cd "$ctxdir" && find kdet -printf '%P %U:%G %m %l\n' | LC_ALL=C sort
		find kdet -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -d' ' -f1)
	if [ -f "$out" ] && [ "$(cat "$out.inputs" 2> /dev/null)" = "$inputs" ]; then
		images_log "$image: up to date ($out)"
		ln -sf "$(basename "$out")" "$IMAGES_OUT/$image.oci.tar"
		rm -rf "$ctxdir"
		rmdir "$IMAGES_OUT/ctx" 2> /dev/null || true
		continue
	fi

	images_log "$image: [3/4] buildah build $ref"
	images_buildah build --layers --timestamp "$epoch" --pull-never \
		-f "$IMAGES_SRC/images/$name/Containerfile" -t "$ref" "$ctxdir" 2>&1 |
		sed -u "s/^/[images $image] /" >&2
	[ "${PIPESTATUS[0]}" -eq 0 ] || images_die "$image: buildah build failed"

	images_log "$image: [4/4] archive"
	tmp="$IMAGES_OUT/.$image.oci.tar"
	rm -f "$tmp" "$out" "$out.inputs"
	images_buildah push --quiet "$ref" "oci-archive:$tmp:$image:$tag" >&2
	line=$(python3 "$IMAGES_SRC/images/archive.py" "$tmp" "$out" "$ref")
	rm -f "$tmp"
	printf '%s\n' "$inputs" > "$out.inputs"
	ln -sf "$(basename "$out")" "$IMAGES_OUT/$image.oci.tar"
	# Archives of older tags go (a build folder keeps the latest only).
	for old in "$IMAGES_OUT/$image"-*.oci.tar; do
		[ "$old" != "$out" ] || continue
		for other in "$IMAGES_SRC"/images/*/Containerfile; do # kdet-trainer-cuda-* is not kdet-trainer's
			other="kdet-$(basename "$(dirname "$other")")"
			case "$other" in "$image"-*) [[ "$(basename "$old")" != "$other"-* ]] || continue 2 ;; esac
		done
		rm -f "$old" "$old.inputs"
	done
	rm -rf "$ctxdir"
	rmdir "$IMAGES_OUT/ctx" 2> /dev/null || true

	# Older tags of this image leave the store, and with them the
	# intermediate images that only they used; the cached base layers stay
	# (they are parents of the new image).
	images_buildah images --format '{{.Name}}:{{.Tag}}' 2> /dev/null |
		grep -F "/$image:" | grep -vxF "$ref" | while read -r old; do
		images_buildah rmi "$old" > /dev/null 2>&1 || true
	done || true
	images_buildah rmi --prune > /dev/null 2>&1 || true

	secs=$(($(date +%s) - start))
	images_log "$image: done in ${secs}s: $out ($(images_human "$(stat -c %s "$out")"))"
	grep -v "^$image " "$summary" 2> /dev/null > "$summary.new" || true
	printf '%s %s %s %ss\n' "$image" "$(basename "$out")" "${line#archive: }" "$secs" >> "$summary.new"
	mv "$summary.new" "$summary"
done
images_log "images in $IMAGES_OUT:"
sed 's/^/  /' "$summary" >&2
