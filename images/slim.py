#!/usr/bin/env python3
"""Copy a shell-less root file system out of a Debian one.

slim.py [--uid N] SRC DST PACKAGE...

Keeps the files of the named packages and of everything they depend on
(Depends and Pre-Depends, first installed alternative), without
documentation other than copyright files, manual pages or translations; adds
the CA bundle, os-release, ld.so's cache, a passwd/group with root and one
unprivileged user, /tmp and a dpkg status.d entry per kept package (so that
image scanners see the versions). No package in the closure of a runtime
library brings a shell, dpkg or apt: the result has none of them.
"""

import argparse
import os
import re
import shutil
import stat
import sys

SKIP = re.compile(r"^/usr/share/(man|locale|info|lintian|bug|doc-base)/|^/usr/share/doc/(?!.*/copyright$)")
EXTRA = ["/etc/ssl/certs/ca-certificates.crt", "/etc/os-release", "/usr/lib/os-release", "/etc/ld.so.cache",
         "/usr/share/doc/ca-certificates/copyright", "/usr/share/doc/base-files/copyright"]
MAX_LINKS = 40


def parse_status(path):
    """The installed packages of a dpkg status file: name -> stanza dict."""
    pkgs = {}
    with open(path, encoding="utf-8") as f:
        for block in f.read().split("\n\n"):
            fields = {}
            text = []
            last = None
            for line in block.splitlines():
                if line[:1] in (" ", "\t") and last:
                    fields[last] += "\n" + line
                elif ":" in line:
                    last, _, value = line.partition(":")
                    fields[last] = value.strip()
                text.append(line)
            if fields.get("Status", "").endswith(" installed"):
                fields["_text"] = "\n".join(text) + "\n"
                pkgs[fields["Package"]] = fields
    return pkgs


def dep_names(value):
    """Alternatives groups of a Depends field: [[name, ...], ...]."""
    groups = []
    for group in value.split(","):
        names = []
        for alt in group.split("|"):
            name = alt.strip().split(" ")[0].split("(")[0].split(":")[0]
            if name:
                names.append(name)
        if names:
            groups.append(names)
    return groups


def closure(pkgs, seeds):
    provides = {}
    for name, fields in pkgs.items():
        for group in dep_names(fields.get("Provides", "")):
            provides.setdefault(group[0], name)
    keep, todo = set(), list(seeds)
    while todo:
        name = todo.pop()
        if name not in pkgs:
            name = provides.get(name, name)
        if name not in pkgs:
            sys.exit(f"slim: package {name} is not installed in the source root")
        if name in keep:
            continue
        keep.add(name)
        for field in ("Pre-Depends", "Depends"):
            for group in dep_names(pkgs[name].get(field, "")):
                hit = next((n for n in group if n in pkgs or n in provides), None)
                if hit is None:
                    sys.exit(f"slim: {name}: no installed package satisfies {' | '.join(group)}")
                todo.append(hit)
    return keep


def canon(src, path):
    """PATH with symbolic links in its folders resolved inside SRC."""
    parts = [p for p in path.split("/") if p]
    out = []
    hops = 0
    while parts:
        part = parts.pop(0)
        cur = "/".join(out + [part])
        full = os.path.join(src, cur)
        if parts and os.path.islink(full):
            hops += 1
            if hops > MAX_LINKS:
                sys.exit(f"slim: too many symbolic links under {path}")
            target = os.readlink(full)
            if target.startswith("/"):
                out = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        if part != ".":
            out.append(part)
    return "/" + "/".join(out)


def copy_one(src, dst, path):
    real = canon(src, path)
    s = os.path.join(src, real.lstrip("/"))
    d = os.path.join(dst, real.lstrip("/"))
    if not os.path.lexists(s) or os.path.lexists(d):
        return 0
    st = os.lstat(s)
    if stat.S_ISDIR(st.st_mode):
        return 0
    os.makedirs(os.path.dirname(d), exist_ok=True)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(s), d)
        target = os.readlink(s)
        # A link's target comes along (alternatives, soname links).
        if not target.startswith("/"):
            target = os.path.join(os.path.dirname(real), target)
        return 1 + copy_one(src, dst, os.path.normpath(target))
    shutil.copy2(s, d)
    os.chown(d, st.st_uid, st.st_gid)
    return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uid", type=int, default=65532)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("packages", nargs="+")
    a = ap.parse_args()

    pkgs = parse_status(os.path.join(a.src, "var/lib/dpkg/status"))
    keep = closure(pkgs, a.packages)
    os.makedirs(a.dst)
    # The merged-/usr links first, so that files land under /usr.
    for top in sorted(os.listdir(a.src)):
        if os.path.islink(os.path.join(a.src, top)):
            os.symlink(os.readlink(os.path.join(a.src, top)), os.path.join(a.dst, top))
    info = os.path.join(a.src, "var/lib/dpkg/info")
    files = 0
    for name in sorted(keep):
        arch = pkgs[name].get("Architecture", "")
        lst = os.path.join(info, f"{name}:{arch}.list")
        if not os.path.exists(lst):
            lst = os.path.join(info, f"{name}.list")
        with open(lst, encoding="utf-8") as f:
            for path in f.read().splitlines():
                if path and path != "/." and not SKIP.search(path):
                    files += copy_one(a.src, a.dst, path)
    for path in EXTRA:
        if not os.path.lexists(os.path.join(a.src, path.lstrip("/"))):
            sys.exit(f"slim: {path} is missing in the source root")
        files += copy_one(a.src, a.dst, path)

    status_d = os.path.join(a.dst, "var/lib/dpkg/status.d")
    os.makedirs(status_d)
    for name in sorted(keep):
        with open(os.path.join(status_d, name), "w", encoding="utf-8") as f:
            f.write(pkgs[name]["_text"])
    etc = os.path.join(a.dst, "etc")
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "passwd"), "w", encoding="utf-8") as f:
        f.write("root:x:0:0:root:/root:/sbin/nologin\n")
        f.write(f"nonroot:x:{a.uid}:{a.uid}:nonroot:/home/nonroot:/sbin/nologin\n")
    with open(os.path.join(etc, "group"), "w", encoding="utf-8") as f:
        f.write(f"root:x:0:\nnonroot:x:{a.uid}:\n")
    with open(os.path.join(etc, "nsswitch.conf"), "w", encoding="utf-8") as f:
        f.write("passwd: files\ngroup: files\nhosts: files dns\n")
    for d, mode, owner in (("tmp", 0o1777, 0), ("root", 0o700, 0), ("home/nonroot", 0o700, a.uid)):
        p = os.path.join(a.dst, d)
        os.makedirs(p, exist_ok=True)
        os.chmod(p, mode)
        os.chown(p, owner, owner)
    print(f"slim: {len(keep)} packages, {files} files: {' '.join(sorted(keep))}", file=sys.stderr)


if __name__ == "__main__":
    main()
