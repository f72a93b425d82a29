#!/usr/bin/env bash
# e2e/kube/api.sh (the API checks also run against kube-apiserver by
# `make e2e-real`) against a fresh kdet-local, so kdet-local keeps answering
# like the real API server where the two were found to differ
# (docs/local.md, "Differences from kube-apiserver").
set -u
work=$(mktemp -d /tmp/kd-local-api.XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
"$KD_BUILD/bin/kdet-local" --data-dir "$work/data" --port 0 --port-file "$work/port" \
    --kubeconfig-out "$work/kubeconfig" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$work/kubeconfig" ] && break; sleep 0.1; done
[ -s "$work/kubeconfig" ] || { echo "kdet-local did not start:"; cat "$work/log"; echo "0 passed, 1 failed"; exit 1; }
unset KDET_KUBE_ETCD KDET_KUBE_CONTROLLER_KUBECONFIG
KUBECONFIG="$work/kubeconfig" KD_DET="$KD_BUILD/bin/det" "$KD_SRC/e2e/kube/api.sh"
rc=$?
kill "$pid"
if ! wait "$pid"; then
    echo "FAIL kdet-local did not stop cleanly"
    tail -n 20 "$work/log"
    rc=1
fi
pid=""
exit $rc
