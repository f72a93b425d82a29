#!/bin/bash
# make bench BENCH=context_pack: packing a ~40 MiB context (the Fashion-MNIST
# .gz files, which do not compress, plus kdet's own sources, which do) with
# `det experiment create --dry-run` against the anchor, GNU tar + gzip with
# the same determinism flags. Prints both means and their ratio.
set -eu
build=${KD_BUILD:-$PWD/build}
src=${KD_SRC:-$PWD}
command -v hyperfine >/dev/null || { echo "bench context_pack: hyperfine not found (make deps, or apt-get install hyperfine)"; exit 1; }
tmp=$(mktemp -d /tmp/kd-bench-pack-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ctx/data" "$tmp/ctx/src"
cp /usr/share/datasets/fashion-mnist/*.gz "$tmp/ctx/data/"
cp -r "$src/lib" "$src/cli" "$src/crds" "$src/docs" "$tmp/ctx/src/"
printf 'entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: {batches: 10}}\n' > "$tmp/exp.yaml"
echo "context: $(du -sh "$tmp/ctx" | cut -f1), $(find "$tmp/ctx" -type f | wc -l) files"
hyperfine --warmup 1 --runs 5 --export-json "$tmp/h.json" \
    -n det "$build/bin/det experiment create $tmp/exp.yaml $tmp/ctx --dry-run > /dev/null 2>&1" \
    -n tar "tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -czf $tmp/out.tar.gz -C $tmp/ctx ." \
    > "$tmp/hyperfine.txt"
/usr/bin/python3 - "$tmp/h.json" <<'PY'
import json, sys
r = {x["command"]: x["mean"] for x in json.load(open(sys.argv[1]))["results"]}
print(f"det experiment create --dry-run: {r['det']*1000:.1f} ms")
print(f"anchor tar -czf (GNU tar + gzip): {r['tar']*1000:.1f} ms")
print(f"ratio det/tar: {r['det']/r['tar']:.2f} (lower is better)")
PY
