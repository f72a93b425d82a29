#!/bin/bash
# Builds the real-node suite's images without a registry: probe.c compiled
# statically, packed as /probe in one uncompressed layer, and an OCI image
# archive (OCI image layout in a tar) holding two images on that layer:
#   kdet.local/pause:e2e   entrypoint /probe pause (containerd's sandbox_image)
#   kdet.local/probe:e2e   entrypoint /probe (the test pods)
# `ctr -n k8s.io images import OUT/images.oci.tar` makes both known to the CRI.
#
# Usage: e2e/kube/node/image.sh OUTDIR    (writes OUTDIR/probe, OUTDIR/images.oci.tar)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: e2e/kube/node/image.sh OUTDIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

case "$(uname -m)" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) echo "image.sh: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

${CC:-gcc} -static -O2 -Wall -Wextra -Werror -o "$out/probe" "$here/probe.c"

lay="$out/oci"
rm -rf "$lay" "$out/rootfs"
mkdir -p "$lay/blobs/sha256" "$out/rootfs"
install -m 755 "$out/probe" "$out/rootfs/probe"
# A reproducible layer: fixed owner and mtime, sorted names.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$out/rootfs" -cf "$out/layer.tar" probe

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# blob FILE: move FILE into blobs/sha256 under its digest; print the digest.
blob() {
	local d
	d="$(sha "$1")"
	mv "$1" "$lay/blobs/sha256/$d"
	echo "$d"
}

layer_size="$(size "$out/layer.tar")"
layer="$(blob "$out/layer.tar")"

# manifest NAME ENTRYPOINT_JSON: the config and manifest blobs of one image;
# prints the index entry.
manifest() {
	local name=$1 ep=$2 cfg cfg_size m m_size
	printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":%s,"WorkingDir":"/","Env":["PATH=/"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"e2e/kube/node/image.sh"}]}' \
		"$arch" "$ep" "$layer" >"$out/config.json"
	cfg_size="$(size "$out/config.json")"
	cfg="$(blob "$out/config.json")"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
		"$cfg" "$cfg_size" "$layer" "$layer_size" >"$out/manifest.json"
	m_size="$(size "$out/manifest.json")"
	m="$(blob "$out/manifest.json")"
	printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}' \
		"$m" "$m_size" "$arch" "$name" "${name##*:}"
}

pause_entry="$(manifest kdet.local/pause:e2e '["/probe","pause"]')"
probe_entry="$(manifest kdet.local/probe:e2e '["/probe"]')"
printf '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
printf '{"schemaVersion":2,"manifests":[%s,%s]}' "$pause_entry" "$probe_entry" >"$lay/index.json"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$lay" -cf "$out/images.oci.tar" oci-layout index.json blobs
rm -rf "$lay" "$out/rootfs"
