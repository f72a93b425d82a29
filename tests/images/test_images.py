#!/usr/bin/python3
"""test_images: what `make images` relies on, checked in seconds.

- the Containerfile linter passes every images/*/Containerfile and rejects
  a broken one (so that it can fail);
- each image's Containerfile, files list and base.conf agree: every ADD/COPY
  source is made by the build, every listed file exists in the build or the
  tree, the image starts from scratch and runs as the unprivileged uid;
- slim.py's package closure and path resolution, table-driven;
- archive.py turns an OCI archive into one with both annotations and a
  Docker manifest.json, and refuses a corrupted blob.
Prints `N passed, N failed`.
"""

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

SRC = os.environ.get("KD_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KD_BUILD") or os.path.join(SRC, "build")
LINT = os.path.join(SRC, ".deps/images-lint/node_modules/.bin/dockerfile-utils")
IMAGES = ["controller", "trainer", "trainer-cuda", "postgresql"]
UID = "65532"
# The user each image runs as: kdet's unprivileged uid, but PostgreSQL keeps
# the official postgres image's 999 (the chart's StatefulSet runs it so).
IMAGE_UID = {"postgresql": "999"}

sys.path.insert(0, os.path.join(SRC, "images"))
import slim  # noqa: E402

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def instructions(path):
    """(KEYWORD, args) of a Containerfile, continuation lines joined."""
    out = []
    cur = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not cur and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            kw, _, args = cur.strip().partition(" ")
            out.append((kw.upper(), args.strip()))
            cur = ""
    return out


def base_conf(name):
    conf = os.path.join(SRC, "images", name, "base.conf")
    script = ('. "$1"; printf "%s\\n" "$BASE_STYLE" "${BASE_DATA:-}" "$BASE_PACKAGES" "${BASE_KEEP:-}"')
    r = subprocess.run(["bash", "-c", script, "-", conf], capture_output=True, text=True, check=True)
    style, data, pkgs, keep = r.stdout.split("\n")[:4]
    return {"style": style, "data": data, "packages": pkgs.split(), "keep": keep.split()}


def files_list(name):
    rows = []
    with open(os.path.join(SRC, "images", name, "files"), encoding="utf-8") as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if fields:
                rows.append(fields)
    return rows


def tree_path(p):
    return os.path.join(BUILD, p[len("build/"):]) if p.startswith("build/") else os.path.join(SRC, p)


def test_lint():
    if not os.access(LINT, os.X_OK):
        check("lint: dockerfile-utils installed", False, f"{LINT} missing: run make deps")
        return
    for name in IMAGES:
        cf = os.path.join(SRC, "images", name, "Containerfile")
        r = subprocess.run([LINT, "lint", cf], capture_output=True, text=True)
        check(f"lint: {name}/Containerfile", r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr)
    bad = os.path.join(SRC, "tests", "images", "bad.Containerfile")
    r = subprocess.run([LINT, "lint", bad], capture_output=True, text=True)
    check("lint: rejects tests/images/bad.Containerfile", r.returncode != 0 and "Unknown instruction" in r.stdout,
          f"rc={r.returncode} {r.stdout}")


def test_consistency(name):
    ins = instructions(os.path.join(SRC, "images", name, "Containerfile"))
    conf = base_conf(name)
    rows = files_list(name)
    made = {"rootfs.tar"}
    if conf["data"]:
        made.add("data.tar")
    if rows:
        made.add("kdet/")
    froms = [a for k, a in ins if k == "FROM"]
    check(f"{name}: starts from scratch", froms == ["scratch"], f"FROM {froms}")
    sources = []
    for kw, args in ins:
        if kw in ("ADD", "COPY"):
            parts = [p for p in args.split() if not p.startswith("--")]
            sources += parts[:-1]
    unknown = [s for s in sources if s not in made]
    check(f"{name}: every ADD/COPY source is made by build.sh", sources and not unknown, f"unknown {unknown}")
    unused = sorted(made - set(sources))
    check(f"{name}: every base layer and the kdet/ tree are used", not unused, f"unused {unused}")
    users = [a for k, a in ins if k == "USER"]
    uid = IMAGE_UID.get(name, UID)
    check(f"{name}: runs as {uid}:{uid}", users == [f"{uid}:{uid}"], f"USER {users}")
    dests = [d for d, _ in rows]
    check(f"{name}: files go under kdet/, once each",
          all(d.startswith("kdet/") for d in dests) and len(set(dests)) == len(dests), f"{dests}")
    missing = [s for _, s in rows if not os.path.exists(tree_path(s))]
    check(f"{name}: every listed file exists in the build or the tree", not missing, f"missing {missing}")
    entry = [a for k, a in ins if k == "ENTRYPOINT"]
    prog = json.loads(entry[-1])[0] if entry else ""
    check(f"{name}: the entrypoint is a listed file", "kdet" + prog in dests, f"ENTRYPOINT {entry}")
    check(f"{name}: base style is slim or full", conf["style"] in ("slim", "full"), conf["style"])
    if conf["style"] == "slim":
        extra = [p for p in conf["keep"] if p not in conf["packages"]]
        check(f"{name}: BASE_KEEP is part of BASE_PACKAGES", conf["keep"] and not extra, f"{extra}")


STATUS = """Package: app
Status: install ok installed
Architecture: amd64
Depends: liba (>= 1), libb | libc, virt

Package: liba
Status: install ok installed
Architecture: amd64
Pre-Depends: libc6:any

Package: libc
Status: install ok installed
Architecture: amd64

Package: libc6
Status: install ok installed
Architecture: amd64
Depends: libgcc-s1

Package: libgcc-s1
Status: install ok installed
Architecture: amd64

Package: provider
Status: install ok installed
Architecture: amd64
Provides: virt (= 2)

Package: removed
Status: deinstall ok config-files
Architecture: amd64
"""


def test_slim():
    table = [
        ("a, b (>= 1)", [["a"], ["b"]]),
        ("a | b:any, c (<< 2) | d", [["a", "b"], ["c", "d"]]),
        ("", []),
        ("libc6 (>= 2.34)", [["libc6"]]),
    ]
    for value, want in table:
        got = slim.dep_names(value)
        check(f"slim.dep_names({value!r})", got == want, f"got {got}")
    with tempfile.TemporaryDirectory() as d:
        status = os.path.join(d, "status")
        with open(status, "w", encoding="utf-8") as f:
            f.write(STATUS)
        pkgs = slim.parse_status(status)
        check("slim.parse_status skips removed packages", "removed" not in pkgs and "app" in pkgs, f"{sorted(pkgs)}")
        got = slim.closure(pkgs, ["app"])
        want = {"app", "liba", "libc", "libc6", "libgcc-s1", "provider"}
        check("slim.closure: depends, pre-depends, first installed alternative, provides", got == want, f"{got}")
        check("slim.closure of a leaf", slim.closure(pkgs, ["libgcc-s1"]) == {"libgcc-s1"}, "")
        pkgs["liba"]["Depends"] = "nosuch"
        try:
            slim.closure(pkgs, ["app"])
            check("slim.closure: an unsatisfied dependency stops", False, "no error")
        except SystemExit as e:
            check("slim.closure: an unsatisfied dependency stops", "nosuch" in str(e), str(e))

        root = os.path.join(d, "root")
        os.makedirs(os.path.join(root, "usr/lib/x86_64-linux-gnu"))
        os.makedirs(os.path.join(root, "etc/alt"))
        os.symlink("usr/lib", os.path.join(root, "lib"))
        os.symlink("/usr/lib", os.path.join(root, "etc/abs"))
        os.symlink("../../usr/lib", os.path.join(root, "etc/alt/rel"))
        os.symlink("loop2", os.path.join(root, "loop1"))
        os.symlink("loop1", os.path.join(root, "loop2"))
        table = [
            ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
            ("/etc/abs/x", "/usr/lib/x"),
            ("/etc/alt/rel/x86_64-linux-gnu/y", "/usr/lib/x86_64-linux-gnu/y"),
            ("/lib", "/lib"),
            ("/usr/./lib/../lib/z", "/usr/lib/z"),
        ]
        for path, want in table:
            got = slim.canon(root, path)
            check(f"slim.canon({path})", got == want, f"got {got}")
        try:
            slim.canon(root, "/loop1/x")
            check("slim.canon: a link loop stops", False, "no error")
        except SystemExit as e:
            check("slim.canon: a link loop stops", "too many" in str(e), str(e))


def add_bytes(tar, path, data):
    ti = tarfile.TarInfo(path)
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))


def sha(data):
    return hashlib.sha256(data).hexdigest()


def make_oci(path, corrupt=False):
    layer_raw = io.BytesIO()
    with tarfile.open(fileobj=layer_raw, mode="w") as lt:
        add_bytes(lt, "hello.txt", b"hello\n")
    raw = layer_raw.getvalue()
    gz = gzip.compress(raw, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(raw)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": "sha256:" + sha(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": "sha256:" + sha(gz), "size": len(gz)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(manifest),
         "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": "t:1"}}]}).encode()
    with tarfile.open(path, "w") as t:
        add_bytes(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes(t, "index.json", index)
        for blob in (config, manifest, gz):
            add_bytes(t, "blobs/sha256/" + sha(blob), gz[:-1] + b"x" if corrupt and blob is gz else blob)
    return sha(config), sha(gz)


def test_archive():
    tool = os.path.join(SRC, "images", "archive.py")
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.tar"), os.path.join(d, "out.tar")
        cfg, layer = make_oci(src)
        r = subprocess.run([sys.executable, tool, src, dst, "docker.io/library/t:v1"], capture_output=True, text=True)
        check("archive: converts a valid OCI archive", r.returncode == 0, r.stderr)
        if r.returncode == 0:
            with tarfile.open(dst) as t:
                names = set(t.getnames())
                index = json.loads(t.extractfile("index.json").read())
                docker = json.loads(t.extractfile("manifest.json").read())
            ann = index["manifests"][0]["annotations"]
            check("archive: index names the image for containerd and by tag",
                  ann.get("io.containerd.image.name") == "docker.io/library/t:v1"
                  and ann.get("org.opencontainers.image.ref.name") == "v1", f"{ann}")
            check("archive: Docker manifest.json over the same blobs",
                  docker == [{"Config": "blobs/sha256/" + cfg, "RepoTags": ["docker.io/library/t:v1"],
                              "Layers": ["blobs/sha256/" + layer]}]
                  and all(p in names for p in [docker[0]["Config"]] + docker[0]["Layers"]), f"{docker}")
        r = subprocess.run([sys.executable, tool, src, dst, "no-tag"], capture_output=True, text=True)
        check("archive: a name without a tag is refused", r.returncode != 0 and "NAME:TAG" in r.stderr, r.stderr)
        make_oci(src, corrupt=True)
        r = subprocess.run([sys.executable, tool, src, dst, "docker.io/library/t:v1"], capture_output=True, text=True)
        check("archive: a corrupted layer is refused", r.returncode != 0 and "digest" in r.stderr, r.stderr)


def test_scripts():
    for script in sorted(os.listdir(os.path.join(SRC, "images"))):
        if script.endswith(".sh"):
            r = subprocess.run(["bash", "-n", os.path.join(SRC, "images", script)], capture_output=True, text=True)
            check(f"bash -n images/{script}", r.returncode == 0, r.stderr)


def main():
    test_lint()
    for name in IMAGES:
        test_consistency(name)
    test_slim()
    test_archive()
    test_scripts()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
