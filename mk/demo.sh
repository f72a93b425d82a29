#!/usr/bin/env bash
# make demo: install what is missing, build, start a local kdet
# (det deploy local up), run an adaptive ASHA search of fashion-mnist-c on
# the real Fashion-MNIST (examples/fashion-mnist-c/demo.yaml: 16 trials of
# 2 workers each), follow it, print the best trial, and leave the cluster
# up. Run it again with the cluster up: it reuses the cluster, and shows
# the finished experiment again (or follows it if it still runs).
#
# Environment: O (build dir, default build), KDET_DATA_DIR (the local
# deployment's directory, det's default otherwise), KDET_DEMO_GPUS (GPU
# slots the node advertises on the first up, default 4: two trials at once).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${O:-build}
GPUS=${KDET_DEMO_GPUS:-4}
CONFIG=examples/fashion-mnist-c/demo.yaml
CONTEXT=examples/fashion-mnist-c
CKPT=/tmp/kdet-checkpoints # checkpoint_storage.host_path in demo.yaml
DET=$B/bin/det
t0=$(date +%s)
step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - t0))" "$*"; }
die() {
    echo "make demo: $*" >&2
    exit 1
}

step "1/6 dependencies (make deps; jq for this script)"
make --no-print-directory deps
mk/deps.sh jq >/dev/null
[ -d /usr/share/datasets/fashion-mnist ] || die "no Fashion-MNIST in /usr/share/datasets/fashion-mnist (package dataset-fashion-mnist)"

step "2/6 build ($B/bin: det, kdet-local, kdet-controller, kdet-launch, fashion-mnist-c)"
make --no-print-directory -j"$(nproc)" O="$B" "$B/bin/det" "$B/bin/kdet-local" \
    "$B/bin/kdet-controller" "$B/bin/kdet-launch" "$B/bin/fashion-mnist-c"

step "3/6 local cluster (det deploy local up --gpus $GPUS)"
dd=()
[ -n "${KDET_DATA_DIR:-}" ] && dd=(--data-dir "$KDET_DATA_DIR")
if "$DET" deploy local status "${dd[@]}" >/dev/null 2>&1; then
    echo "a local kdet is already up: reusing it (det deploy local status)"
fi
# up is idempotent: it starts what is not running and prints the KUBECONFIG line.
eval "$("$DET" deploy local up "${dd[@]}" --gpus "$GPUS")"
[ -n "${KUBECONFIG:-}" ] || die "det deploy local up printed no KUBECONFIG"
export KUBECONFIG

step "4/6 submit $CONFIG (adaptive ASHA, 16 trials x 2 workers, real Fashion-MNIST)"
mkdir -p "$CKPT"
# The name is derived from the config and the context: the same files give the same name.
name=$("$DET" experiment create "$CONFIG" "$CONTEXT" --dry-run 2>/dev/null |
    awk '/^kind: Experiment/ { e = 1 } e && /^  name: / { print $2; exit }')
[ -n "$name" ] || die "cannot compute the experiment's name (det experiment create --dry-run)"
state=$("$DET" experiment describe "$name" -o json 2>/dev/null | jq -r '.experiment.status.state // ""' || true)
case "$state" in
"")
    "$DET" experiment create "$CONFIG" "$CONTEXT" >/dev/null
    ;;
COMPLETED)
    echo "experiment $name already ran to COMPLETED on this cluster: showing it again"
    echo "(to run it anew: $DET experiment delete $name --yes && make demo)"
    ;;
CANCELED | ERROR)
    echo "experiment $name ended $state earlier: deleting it and submitting it again"
    "$DET" experiment delete "$name" --yes >/dev/null
    for _ in $(seq 1 100); do
        "$DET" experiment describe "$name" >/dev/null 2>&1 || break
        sleep 0.3
    done
    "$DET" experiment create "$CONFIG" "$CONTEXT" >/dev/null
    ;;
*)
    echo "experiment $name is already $state on this cluster: following it"
    ;;
esac

step "5/6 follow $name (det experiment wait; Ctrl-C stops following, not the experiment)"
"$DET" experiment wait "$name"

step "6/6 the best trial"
"$DET" experiment describe "$name" -o json | jq -r --arg ckpt "$CKPT" '
    [.trials[] | select(.status.bestValidation.value != null)]
    | max_by(.status.bestValidation.value) as $b
    | "trials:              \(length) with a validation",
      "best trial:          \($b.metadata.name) (\($b.status.state), \($b.status.batchesTrained) batches)",
      "validation accuracy: \($b.status.bestValidation.value) at \($b.status.bestValidation.batches) batches",
      "hyperparameters:     \($b.spec.hparams | tojson)",
      "checkpoint:          \($b.status.latestCheckpoint.uuid // "none") (\($b.status.latestCheckpoint.batches // 0) batches) in \($ckpt)/\($b.status.latestCheckpoint.uuid // "")"'
echo
ddh=${KDET_DATA_DIR:+ --data-dir $KDET_DATA_DIR}
echo "make demo: done in $(($(date +%s) - t0))s. The cluster stays up; try:"
hint() { if [ -n "${2:-}" ]; then printf '  %-52s # %s\n' "$1" "$2"; else printf '  %s\n' "$1"; fi; }
hint "export KUBECONFIG=$KUBECONFIG"
hint "$DET experiment list" "experiments and their state"
hint "$DET experiment describe $name" "its trials, best validation"
hint "$DET trial list $name"
hint "kubectl get exp,trials" "the same, as Kubernetes resources"
hint "$DET experiment create examples/fashion-mnist-c/const.yaml examples/fashion-mnist-c -f" "another run, followed"
hint "$DET deploy local down$ddh" "stop it (the data stays for the next up)"
