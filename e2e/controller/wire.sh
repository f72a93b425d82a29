#!/usr/bin/env bash
# kdet-controller with a database: the token key Secret is created once, the
# API answers /healthz, and each trial gets its token Secret (owned by the
# Trial, holding the token the API derives) and the worker environment
# (KDET_TOKEN from the Secret, KDET_NAMESPACE, KDET_CONTROLLER_URL,
# KDET_CHECKPOINT_STORAGE, KDET_LENGTH_UNIT); experiment and trial rows are
# in the store before the pods start.
. "$(dirname "$0")/lib.sh"
PGB=${KD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$PGB/initdb" ] || { echo "SKIP: no PostgreSQL server binaries"; rm -rf "$T"; exit 77; }
PGDIR=$T/pg
# as root, PostgreSQL refuses to run: run it as nobody
pgrun() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
pg_stop() { [ -d "$PGDIR/data" ] && pgrun "$PGB/pg_ctl" -D "$PGDIR/data" -m immediate -w stop >/dev/null 2>&1; }
trap 'pg_stop; finish; exit $?' EXIT
mkdir -p "$PGDIR" && chmod 755 "$T"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$PGDIR"
pgrun "$PGB/initdb" -D "$PGDIR/data" -U kdet -A trust --no-sync >"$T/initdb.log" 2>&1 || { cat "$T/initdb.log"; exit 1; }
pgrun "$PGB/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w \
    -o "-k $PGDIR -c listen_addresses='' -c fsync=off" start >/dev/null || { cat "$PGDIR/server.log"; exit 1; }
pgrun "$PGB/createdb" -h "$PGDIR" -U kdet kdet || exit 1
psqlq() { pgrun "$PGB/psql" -h "$PGDIR" -U kdet -d kdet -tAc "$1" 2>/dev/null; }
log "PostgreSQL up in $PGDIR"

start_local 2 || exit 1
start_ctrl --database-url "host=$PGDIR user=kdet dbname=kdet" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
echo "# controller url: $URL"
check "healthz answers" wait_for 10 curl -sf "$URL/healthz"
check "token key Secret created" wait_for 10 kubectl get secret -n default kdet-controller-key
key1=$(field secret kdet-controller-key '{.data.key}')

experiment wire "  entrypoint: sh -c 'env | grep ^KDET_ > $T/env-\$KDET_TRIAL_ID; sleep 0.3; exit 0'
  hyperparameters:
    lr: {type: categorical, vals: [0.1, 0.2]}
  searcher: {name: grid, metric: loss, max_length: {batches: 20}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  resources: {slots_per_trial: 1}"
check "experiment COMPLETED" wait_for 60 exp_state_is wire COMPLETED
check "token Secret of wire-1 owned by its Trial" test \
    "$(field secret wire-1-token '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}')" = \
    "Trial/$(field trial wire-1 '{.metadata.uid}')"
tok=$(field secret wire-1-token '{.data.token}' | base64 -d)
check "the pod got KDET_TOKEN from the Secret" grep -qx "KDET_TOKEN=$tok" "$T/env-wire-1"
check "the token is the trial's (API accepts it)" test "$(curl -s -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $tok" "$URL/api/v1/namespaces/default/trials/wire-1/searcher/operation?completed=0&timeout=0")" != 401
check "another trial's token is refused" test "$(curl -s -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $tok" "$URL/api/v1/namespaces/default/trials/wire-2/searcher/operation?completed=0&timeout=0")" = 401
check "KDET_NAMESPACE" grep -qx "KDET_NAMESPACE=default" "$T/env-wire-1"
check "KDET_CONTROLLER_URL" grep -qx "KDET_CONTROLLER_URL=$URL" "$T/env-wire-1"
check "KDET_LENGTH_UNIT" grep -qx "KDET_LENGTH_UNIT=batches" "$T/env-wire-1"
check "KDET_CHECKPOINT_STORAGE" grep -q "^KDET_CHECKPOINT_STORAGE=.*\"host_path\":\"$T/ckpt\"" "$T/env-wire-2"
check "no token in the controller log" eval "! grep -qF -- '$tok' '$T/ctrl.log'"
check "experiment row stored" test "$(psqlq "select count(*) from experiments where name='wire'")" = 1
check "trial rows stored" test "$(psqlq "select count(*) from trials")" = 2

stop_ctrl
start_ctrl --database-url "host=$PGDIR user=kdet dbname=kdet" --api-listen 127.0.0.1:0 --namespace default
check "API serving after a restart" wait_for 20 n_is 2 grep -c 'msg="API serving"' "$T/ctrl.log"
check "the token key is kept across restarts" test "$(field secret kdet-controller-key '{.data.key}')" = "$key1"
