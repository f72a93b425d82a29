#!/usr/bin/env python3
"""Turn buildah's OCI archive into one that ctr, Docker and kind all load.

archive.py IN.tar OUT.tar NAME:TAG

The output is an OCI image layout (oci-layout, index.json, blobs/sha256/...)
whose index entry carries both io.containerd.image.name (the full name, as
`ctr images import` and `kind load image-archive` use it) and
org.opencontainers.image.ref.name (the tag), plus a Docker manifest.json over
the same blobs (what `docker load` reads). Every blob's digest is checked on
the way. Prints the layers and the image's compressed and unpacked sizes.
"""

import gzip
import hashlib
import io
import json
import sys
import tarfile
import zlib

MAX_META = 1 << 20
CHUNK = 1 << 20


def layer_check(tin, members, path, layer, diff_id):
    """Check a layer blob's digest, then its diff_id (streamed); return sizes."""
    m = members.get(path)
    if m is None:
        sys.exit(f"archive: no blob {path}")
    outer = hashlib.sha256()
    f = tin.extractfile(m)
    for chunk in iter(lambda: f.read(CHUNK), b""):
        outer.update(chunk)
    if "sha256:" + outer.hexdigest() != layer["digest"]:
        sys.exit(f"archive: {path} does not match its digest")
    inner = hashlib.sha256()
    raw_n = 0
    f = tin.extractfile(m)
    r = gzip.GzipFile(fileobj=f) if "gzip" in layer["mediaType"] else f
    try:
        for chunk in iter(lambda: r.read(CHUNK), b""):
            inner.update(chunk)
            raw_n += len(chunk)
    except (OSError, EOFError, zlib.error) as e:
        sys.exit(f"archive: {path}: {e}")
    if "sha256:" + inner.hexdigest() != diff_id:
        sys.exit(f"archive: {path} does not match its diff_id {diff_id}")
    return m.size, raw_n


def main():
    src, dst, ref = sys.argv[1:4]
    name, _, tag = ref.rpartition(":")
    if not name or not tag or "/" in tag:
        sys.exit(f"archive: NAME:TAG expected, got {ref!r}")
    with tarfile.open(src) as tin:
        members = {m.name.lstrip("./"): m for m in tin.getmembers() if m.isfile()}

        def read(path, cap=None):
            m = members.get(path)
            if m is None:
                sys.exit(f"archive: {src} has no {path}")
            if cap is not None and m.size > cap:
                sys.exit(f"archive: {path} is larger than {cap} bytes")
            return tin.extractfile(m).read()

        def blob(digest, cap=None):
            algo, _, hexd = digest.partition(":")
            if algo != "sha256":
                sys.exit(f"archive: unsupported digest {digest}")
            data = read(f"blobs/sha256/{hexd}", cap)
            if hashlib.sha256(data).hexdigest() != hexd:
                sys.exit(f"archive: blob {digest} does not match its digest")
            return data

        index = json.loads(read("index.json", MAX_META))
        if len(index.get("manifests", [])) != 1:
            sys.exit("archive: expected exactly one manifest in index.json")
        desc = index["manifests"][0]
        manifest = json.loads(blob(desc["digest"], MAX_META))
        config = json.loads(blob(manifest["config"]["digest"], MAX_META))
        diff_ids = config.get("rootfs", {}).get("diff_ids", [])
        if len(diff_ids) != len(manifest["layers"]):
            sys.exit("archive: the config's diff_ids and the manifest's layers differ in number")

        desc.setdefault("annotations", {})
        desc["annotations"]["io.containerd.image.name"] = ref
        desc["annotations"]["org.opencontainers.image.ref.name"] = tag
        layer_paths = []
        unpacked = 0
        compressed = 0
        for i, layer in enumerate(manifest["layers"]):
            path = "blobs/sha256/" + layer["digest"].split(":", 1)[1]
            packed_n, raw_n = layer_check(tin, members, path, layer, diff_ids[i])
            layer_paths.append(path)
            compressed += packed_n
            unpacked += raw_n
            print(f"archive: layer {i + 1}: {packed_n / 1048576:.1f} MiB compressed, "
                  f"{raw_n / 1048576:.1f} MiB unpacked", file=sys.stderr)
        docker = [{
            "Config": "blobs/sha256/" + manifest["config"]["digest"].split(":", 1)[1],
            "RepoTags": [ref],
            "Layers": layer_paths,
        }]

        mtime = 0
        with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tout:
            def add(path, data):
                ti = tarfile.TarInfo(path)
                ti.size = len(data)
                ti.mtime = mtime
                ti.mode = 0o644
                tout.addfile(ti, io.BytesIO(data))

            add("oci-layout", read("oci-layout", MAX_META))
            add("index.json", json.dumps(index, separators=(",", ":")).encode())
            add("manifest.json", json.dumps(docker, separators=(",", ":")).encode())
            for path in sorted(p for p in members if p.startswith("blobs/")):
                m = members[path]
                ti = tarfile.TarInfo(path)
                ti.size = m.size
                ti.mtime = mtime
                ti.mode = 0o644
                tout.addfile(ti, tin.extractfile(m))
    print(f"archive: {ref}: {len(layer_paths)} layers, {compressed / 1048576:.1f} MiB compressed, "
          f"{unpacked / 1048576:.1f} MiB unpacked")


if __name__ == "__main__":
    main()
