#!/usr/bin/env bash
# images/verify.sh [ARCHIVE...]: check the image archives that `make images`
# wrote (default: build/images/kdet-controller.oci.tar and
# build/images/kdet-trainer.oci.tar) the way a node would use them:
#   1. unpack each archive's layers in the order of its Docker manifest.json
#      and run commands in it with runc, as the image's user (its config's
#      User, a non-root uid), with a read-only root file system, in a
#      network namespace of its own that has only loopback;
#   2. import each archive into a private containerd (own root, state and
#      socket under a temporary folder, stopped afterwards) with
#      `ctr images import` and check the image's name, then run a command
#      in it with `ctr run` (snapshotter native).
# Prints `N passed, N failed`; exits non-zero on a failure.
set -uo pipefail
. "$(dirname "$0")/common.sh"

[ "$(id -u)" -eq 0 ] || images_die "verify.sh needs root (runc, containerd)"
for t in runc containerd ctr jq ip; do
	command -v "$t" > /dev/null || images_die "$t is missing: run make images-deps"
done
archives=("$@")
if [ ${#archives[@]} -eq 0 ]; then
	archives=("$IMAGES_OUT/kdet-controller.oci.tar" "$IMAGES_OUT/kdet-trainer.oci.tar")
fi

passed=0
failed=0
ok() {
	passed=$((passed + 1))
	images_log "ok   $*"
}
bad() {
	failed=$((failed + 1))
	images_log "FAIL $*"
}

work=$(mktemp -d /tmp/kdet-images-verify.XXXXXX)
netns="kdet-images-$$"
ctrd_pid=""
cleanup() {
	if [ -n "$ctrd_pid" ]; then
		kill "$ctrd_pid" 2> /dev/null
		wait "$ctrd_pid" 2> /dev/null
	fi
	# Mounts that the native snapshotter or runc left behind, deepest first.
	grep -o " $work[^ ]*" /proc/self/mounts | sort -r | while read -r m; do umount -l "$m" 2> /dev/null; done
	ip netns delete "$netns" 2> /dev/null
	rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$netns" || images_die "cannot make a network namespace"
ip -n "$netns" link set lo up

# bundle ARCHIVE DIR: unpack the image into DIR/rootfs and write a runc
# config.json from its image config.
bundle() {
	local archive=$1 dir=$2 cfg layer
	mkdir -p "$dir/img" "$dir/rootfs"
	tar -C "$dir/img" -xf "$archive" || return 1
	cfg="$dir/img/$(jq -r '.[0].Config' "$dir/img/manifest.json")"
	for layer in $(jq -r '.[0].Layers[]' "$dir/img/manifest.json"); do
		tar -C "$dir/rootfs" --numeric-owner -xpzf "$dir/img/$layer" || return 1
	done
	(cd "$dir" && runc spec) || return 1
	jq --slurpfile img "$cfg" --arg ns "/var/run/netns/$netns" '
		($img[0].config) as $c
		| ($c.User // "0:0" | split(":")) as $u
		| .root = {path: "rootfs", readonly: true}
		| .process.terminal = false
		| .process.user = {uid: ($u[0] | tonumber), gid: ($u[1] // $u[0] | tonumber)}
		| .process.env = ($c.Env // [])
		| .process.cwd = ($c.WorkingDir // "/")
		| .linux.namespaces = [.linux.namespaces[] | if .type == "network" then .path = $ns else . end]
		| .mounts += [{destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "mode=1777"]}]
		| if ($c.WorkingDir // "/") != "/" then .mounts += [{destination: $c.WorkingDir, type: "tmpfs", source: "tmpfs",
		      options: ["nosuid", "nodev", "mode=0700", "uid=\($u[0])", "gid=\($u[1] // $u[0])"]}] else . end
	' "$dir/config.json" > "$dir/config.new" && mv "$dir/config.new" "$dir/config.json"
}

# inimage DIR NAME ARGS...: run ARGS in the bundle DIR with runc; output in DIR/NAME.log.
n=0
inimage() {
	local dir=$1 name=$2
	shift 2
	n=$((n + 1))
	# (jq 1.6 takes --help among --args for its own option: python3 sets them.)
	python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c["process"]["args"] = sys.argv[2:]
json.dump(c, open(sys.argv[1], "w"))' "$dir/config.json" "$@"
	timeout 300 runc --root "$work/runc" run --bundle "$dir" "kdet-verify-$$-$n" > "$dir/$name.log" 2>&1 < /dev/null
}

# expect DIR NAME PATTERN ARGS...: ARGS succeed in the image and print PATTERN.
expect() {
	local dir=$1 name=$2 pattern=$3
	shift 3
	if inimage "$dir" "$name" "$@" && grep -qE "$pattern" "$dir/$name.log"; then
		ok "$name: $* (as uid $(jq .process.user.uid "$dir/config.json"), read-only root)"
	else
		bad "$name: $*: $(tail -5 "$dir/$name.log" | tr '\n' ' ')"
	fi
}

for archive in "${archives[@]}"; do
	[ -f "$archive" ] || images_die "no $archive (run make images)"
	base=$(basename "$(readlink -f "$archive")" .oci.tar)
	dir="$work/$base"
	images_log "$base: unpacking for runc"
	if ! bundle "$archive" "$dir"; then
		bad "$base: unpack"
		continue
	fi
	uid=$(jq .process.user.uid "$dir/config.json")
	if [ "$uid" -ne 0 ]; then ok "$base: runs as uid $uid"; else bad "$base: runs as root"; fi
	# kdet's files belong to root, and the user the image runs as cannot
	# change them (Debian's own /usr/local folders are root:staff 2775).
	kfiles=$(find "$dir/rootfs/usr/local" "$dir/rootfs/usr/lib/python3/dist-packages/kdet" -type f 2> /dev/null | wc -l)
	wrong=$(find "$dir/rootfs/usr/local" "$dir/rootfs/usr/lib/python3/dist-packages/kdet" -type f \( ! -uid 0 -o -perm /022 \) \
		-printf '%P %u %m\n' 2> /dev/null)
	if [ "$kfiles" -gt 0 ] && [ -z "$wrong" ]; then
		ok "$base: kdet's $kfiles files are root's and not writable by group or others"
	else
		bad "$base: kdet's files ($kfiles): $(tr '\n' ' ' <<< "$wrong")"
	fi
	case "$base" in
	kdet-controller-*)
		expect "$dir" controller-help 'usage: kdet-controller' /usr/local/bin/kdet-controller --help
		expect "$dir" det-version '^det [0-9]' /usr/local/bin/det --version
		if [ ! -e "$dir/rootfs/bin/sh" ] && [ ! -e "$dir/rootfs/usr/bin/apt" ] && [ ! -e "$dir/rootfs/usr/bin/dpkg" ]; then
			ok "$base: no /bin/sh, apt or dpkg"
		else
			bad "$base: a shell or package manager is present"
		fi
		;;
	kdet-trainer-*)
		expect "$dir" python-import '^torch 1\.' /usr/bin/python3 -c \
			'import torch, numpy, kdet, kdet.pytorch, kdet.harness; from kdet import _dtrain; _dtrain.load(); print("torch", torch.__version__)'
		expect "$dir" launch-help 'usage: kdet-launch' /usr/local/bin/kdet-launch --help
		expect "$dir" dtrain-help 'usage' /usr/local/bin/dtrain --help
		expect "$dir" fmnist-2-ranks '^\[rank=0\] final test_accuracy=0\.[0-9]+' /usr/local/bin/kdet-launch --nproc 2 \
			/usr/local/bin/fashion-mnist-c --data /usr/share/datasets/fashion-mnist \
			--epochs 1 --batches 20 --train-limit 2000 --test-limit 500
		images_log "     fashion-mnist-c in the trainer: $(grep -m1 -o 'final test_accuracy=[0-9.]*' "$dir/fmnist-2-ranks.log")"
		;;
	esac
done

# containerd: a private instance, then import and run each archive.
images_log "containerd: starting a private instance under $work/containerd"
mkdir -p "$work/containerd"
cat > "$work/containerd/config.toml" << EOF
version = 2
root = "$work/containerd/root"
state = "$work/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd/sock"
[ttrpc]
  address = "$work/containerd/sock.ttrpc"
EOF
containerd --config "$work/containerd/config.toml" > "$work/containerd/log" 2>&1 &
ctrd_pid=$!
sock="$work/containerd/sock"
for _ in $(seq 1 100); do
	ctr -a "$sock" version > /dev/null 2>&1 && break
	sleep 0.2
done
if ! ctr -a "$sock" version > /dev/null 2>&1; then
	bad "containerd did not start: $(tail -3 "$work/containerd/log" | tr '\n' ' ')"
else
	for archive in "${archives[@]}"; do
		base=$(basename "$(readlink -f "$archive")" .oci.tar)
		name=$(tar -xOf "$archive" index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"]')
		# The command line of kind's `kind load image-archive` (archive on
		# stdin, --digests), with the snapshotter that works anywhere.
		if ctr -a "$sock" -n k8s.io images import --all-platforms --digests --snapshotter=native - \
			< "$archive" > "$work/$base.import" 2>&1 &&
			ctr -a "$sock" -n k8s.io images ls -q | grep -qxF "$name"; then
			ok "$base: ctr -n k8s.io images import --all-platforms --digests - gives $name"
		else
			bad "$base: ctr images import: $(tr '\n' ' ' < "$work/$base.import")"
			continue
		fi
		case "$base" in
		kdet-controller-*) cmd=(/usr/local/bin/det --version) ;;
		*) cmd=(/usr/local/bin/kdet-launch --help) ;;
		esac
		if timeout 300 ctr -a "$sock" -n k8s.io run --rm --snapshotter native --read-only \
			"$name" "kdet-verify-$$-$base" "${cmd[@]}" > "$work/$base.run" 2>&1; then
			ok "$base: ctr run --read-only $name ${cmd[*]}"
		else
			bad "$base: ctr run: $(tail -3 "$work/$base.run" | tr '\n' ' ')"
		fi
	done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
