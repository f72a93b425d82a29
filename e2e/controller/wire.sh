#!/usr/bin/env bash
# kdet-controller with a database: the token key Secret is created once, the
# API answers /healthz, and each trial gets its token Secret (owned by the
# Trial, holding the token the API derives) and the worker environment
# (KDET_TOKEN from the Secret, KDET_NAMESPACE, KDET_CONTROLLER_URL,
# KDET_CHECKPOINT_STORAGE, KDET_LENGTH_UNIT); experiment and trial rows are
# in the store before the pods start. A shell worker drives the searcher
# through the API (validations → searcher → validateAfter/closed → stop);
# an early exit ends its trial without a restart. The store keeps a trial's
# restarts, and its state changes and restarts (with their cause) as events of
# its history; an experiment deleted while it runs is DELETED there.
# GET /metrics passes promtool and counts what the run did; /readyz is 200.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1

start_local 2 || exit 1
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
echo "# controller url: $URL"
check "healthz answers" wait_for 10 curl -sf "$URL/healthz"
check "token key Secret created" wait_for 10 kubectl get secret -n default kdet-controller-key
key1=$(field secret kdet-controller-key '{.data.key}')

# A worker in sh: ask for the searcher operation, report a validation at its length, until stop.
cat >"$T/worker.sh" <<'W'
H="Authorization: Bearer $KDET_TOKEN"
B="$KDET_CONTROLLER_URL/api/v1/namespaces/$KDET_NAMESPACE/trials/$KDET_TRIAL_ID"
env | grep ^KDET_ >"$OUTDIR/env-$KDET_TRIAL_ID"
if [ "${EARLY:-}" = 1 ]; then
    curl -sf -H "$H" -X POST -d '{"reason":"invalid_hp","message":"diverges"}' "$B/early_exit" >/dev/null
    exit 1
fi
loss=$(echo "$KDET_HPARAMS" | sed 's/.*"lr":\([0-9.]*\).*/\1/')
done=0
while :; do
    op=$(curl -sf -H "$H" "$B/searcher/operation?completed=$done&timeout=10") || exit 1
    case "$op" in
    *'"stop"'*) exit 0 ;;
    *validate_after*) ;;
    *) continue ;;
    esac
    len=$(echo "$op" | sed 's/.*"length": *\([0-9]*\).*/\1/')
    curl -sf -H "$H" -X POST -d "{\"kind\":\"validation\",\"key\":\"$KDET_RUN_ID-$len\",\"rows\":[{\"batches\":$len,\"metrics\":{\"loss\":$loss}}]}" \
        "$B/metrics" >/dev/null || exit 1
    echo "$len" >>"$OUTDIR/validated-$KDET_TRIAL_ID"
    done=$len
done
W
experiment wire "  entrypoint: sh $T/worker.sh
  environment:
    environment_variables: [OUTDIR=$T]
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
check "KDET_TRIAL_INT_ID is the trial's id in the store (what det shows)" grep -qx \
    "KDET_TRIAL_INT_ID=$(psqlq "select id from trials where uid = '$(field trial wire-1 '{.metadata.uid}')'")" "$T/env-wire-1"
check "KDET_EXPERIMENT_INT_ID is the experiment's" grep -qx \
    "KDET_EXPERIMENT_INT_ID=$(psqlq "select id from experiments where name = 'wire'")" "$T/env-wire-1"
check "KDET_CONTROLLER_URL" grep -qx "KDET_CONTROLLER_URL=$URL" "$T/env-wire-1"
check "KDET_LENGTH_UNIT" grep -qx "KDET_LENGTH_UNIT=batches" "$T/env-wire-1"
check "KDET_CHECKPOINT_STORAGE" grep -q "^KDET_CHECKPOINT_STORAGE=.*\"host_path\":\"$T/ckpt\"" "$T/env-wire-2"
check "no token in the controller log" eval "! grep -qF -- '$tok' '$T/ctrl.log'"
check "experiment row stored" test "$(psqlq "select count(*) from experiments where name='wire'")" = 1
check "trial rows stored" test "$(psqlq "select count(*) from trials")" = 2
check "both trials COMPLETED" test "$(kubectl get trial -l kdet.io/experiment=wire \
    -o 'jsonpath={range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^COMPLETED$')" = 2
check "each trial validated once at its target" test "$(cat "$T/validated-wire-1" "$T/validated-wire-2" | tr '\n' ' ')" = "20 20 "
check "searcher decisions recorded as events" test "$(psqlq "select count(*) from events e join experiments x \
    on x.id = e.experiment_id where x.name = 'wire' and e.kind = 'searcher' and e.decision = 'close'")" = 2
check "the searcher's first decisions too (create and validate_after of both trials)" test "$(psqlq "select \
    count(*) from events e join experiments x on x.id = e.experiment_id where x.name = 'wire' and \
    e.kind = 'searcher' and e.decision in ('create', 'validate_after')")" = 4
check "validations stored" test "$(psqlq "select count(*) from metrics where kind='validation'")" = 2
# A trial's state changes are in its history (events of kind trial), the first before it had a row.
history() { psqlq "select string_agg(e.decision, ' ' order by e.id) from events e join experiments x
    on x.id = e.experiment_id where x.name = '$1' and e.kind = 'trial' and e.details->>'trial' = '$2'"; }
# QUEUED is not there when the scheduler admitted the trial before its first status was written.
h1=$(history wire wire-1)
check "wire-1's state changes in its history: [QUEUED] ACTIVE COMPLETED ($h1)" \
    eval '[[ "$h1" =~ ^(QUEUED\ )?ACTIVE\ COMPLETED$ ]]'
check "... from its first attempt on with the trial's id" test "$(psqlq "select string_agg(coalesce(t.uid, '-'), ' '
    order by e.id) from events e left join trials t on t.id = e.trial_id where e.kind = 'trial' and
    e.details->>'trial' = 'wire-1' and e.decision <> 'QUEUED'")" = "$(field trial wire-1 '{.metadata.uid}') $(field trial wire-1 '{.metadata.uid}')"
check "... and the states it came from (none, then each one before)" test "$(psqlq "select string_agg(coalesce(e.details->>'from', '-'), ' ' order by e.id)
    from events e where e.kind = 'trial' and e.details->>'trial' = 'wire-1'")" = "- ${h1% *}"
check "latestValidation value from the worker" test "$(field trial wire-2 '{.status.latestValidation.value}')" = 0.2
check "bestValidation from the worker" test "$(field trial wire-1 '{.status.bestValidation.value}')" = 0.1

# GET /metrics: Prometheus' text format (promtool agrees), with what this run did; /readyz.
curl -sf "$URL/metrics" >"$T/metrics.txt"
check "/metrics passes promtool check metrics" eval "/usr/bin/promtool check metrics <'$T/metrics.txt' >'$T/promtool.out' 2>&1 || { cat '$T/promtool.out'; false; }"
mval() { awk -v k="$1" '$1 == k { print $2 }' "$T/metrics.txt"; }
check "metrics: 2 COMPLETED trials" test "$(mval 'kdet_trials{state="COMPLETED"}')" = 2
check "metrics: 1 COMPLETED experiment" test "$(mval 'kdet_experiments{state="COMPLETED"}')" = 1
check "metrics: trial reconciles counted" test "$(mval 'kdet_reconciles_total{kind="trial",result="ok"}' | cut -d. -f1)" -gt 0
check "metrics: reconcile latency observed" test "$(mval 'kdet_reconcile_duration_seconds_count{kind="experiment"}')" -gt 0
check "metrics: work-queue depth" grep -q '^kdet_workqueue_depth{queue="trials"} ' "$T/metrics.txt"
check "metrics: metric rows written (the 2 validations)" test "$(mval kdet_metric_rows_written_total)" -ge 2
check "metrics: database latency" test "$(mval 'kdet_db_statement_duration_seconds_count{op="statement"}')" -gt 0
check "metrics: API requests by route and code" grep -q '^kdet_api_requests_total{method="POST",route="api/v1/namespaces/\*/trials/\*/metrics",code="200"} [1-9]' "$T/metrics.txt"
check "metrics: this replica acts" test "$(mval kdet_leader)" = 1
check "metrics: no token in them" eval "! grep -qF -- '$(field secret wire-1-token '{.data.token}' | base64 -d)' '$T/metrics.txt'"
# Events tell each object's story (kubectl describe): a trial's start and end, the experiment's end.
evs() { kubectl get events -n default --field-selector "involvedObject.kind=$1,involvedObject.name=$2" \
    -o 'jsonpath={range .items[*]}{.type}/{.reason}: {.message}{"\n"}{end}'; }
check "Event: wire-1 Running" wait_for 10 eval "evs Trial wire-1 | grep -q '^Normal/Running: Trial QUEUED -> ACTIVE'"
check "Event: wire-1 Completed" wait_for 10 eval "evs Trial wire-1 | grep -q '^Normal/Completed: Trial .* -> COMPLETED'"
check "Event: experiment wire Completed" wait_for 10 eval "evs Experiment wire | grep -q '^Normal/Completed: Experiment .* -> COMPLETED'"
check "kubectl describe trial shows them" eval "kubectl describe trial wire-1 -n default | grep -q 'Trial QUEUED -> ACTIVE'"
check "/readyz answers 200 with the database up" test "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200

experiment early "  entrypoint: sh $T/worker.sh
  environment:
    environment_variables: [OUTDIR=$T, EARLY=1]
  hyperparameters:
    lr: 0.1
  max_restarts: 3
  searcher: {name: single, metric: loss, max_length: {batches: 20}}
  resources: {slots_per_trial: 1}"
check "an early exit ends the experiment" wait_for 60 eval 'exp_state_is early COMPLETED || exp_state_is early ERROR'
check "the trial that exited early is ERROR" test "$(field trial early-1 '{.status.state}')" = ERROR
check "and was not restarted" eval 'case "$(field trial early-1 "{.status.restarts}")" in "" | 0) true ;; *) false ;; esac'

stop_ctrl
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving after a restart" wait_for 20 n_is 2 grep -c 'msg="API serving"' "$T/ctrl.log"
check "the token key is kept across restarts" test "$(field secret kdet-controller-key '{.data.key}')" = "$key1"

# The store follows the Trials: a trial's restarts, and the end of an experiment deleted live.
experiment failing '  entrypoint: sh -c "exit 3"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 2
  resources: {slots_per_trial: 1}'
check "a failing trial ends ERROR after 2 restarts" wait_for 60 trial_state_is failing-1 ERROR
check "its 2 restarts are in the store" wait_for 10 n_is 2 psqlq \
    "select t.restarts from trials t join experiments e on e.id = t.experiment_id where e.name = 'failing'"
check "... and in its history with their cause, then its end ($(history failing failing-1))" eval \
    '[[ "$(history failing failing-1)" =~ ^(QUEUED\ )?ACTIVE\ restart\ ACTIVE\ restart\ ACTIVE\ ERROR$ ]] &&
     [ "$(psqlq "select count(*) from events where kind = '"'trial'"' and decision = '"'restart'"' and
        details->>'"'trial'"' = '"'failing-1'"' and reason like '"'%exit code 3%'"'")" = 2 ]'
# A worker that exits 0 without completing its searcher operation is not relaunched for ever:
# each such attempt counts as a failed one, and the trial ends ERROR saying why.
experiment quitter '  entrypoint: sh -c "exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 1
  resources: {slots_per_trial: 1}'
check "exit 0 short of the operation: ERROR after 1 restart" wait_for 60 trial_state_is quitter-1 ERROR
check "its message says why" eval "field trial quitter-1 '{.status.message}' | grep -q 'exited 0 before completing the searcher.s operation'"
check "and it was restarted once, not for ever" test "$(field trial quitter-1 '{.status.restarts}')" = 1
# sleeping NAME: an experiment whose one trial sleeps; checks that it runs and is ACTIVE in the store.
sleeping() {
    experiment "$1" '  entrypoint: sleep 300
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}'
    check "$1: a sleeping trial runs" wait_for 30 trial_state_is "$1-1" ACTIVE
    check "$1: ACTIVE in the store" wait_for 10 n_is ACTIVE psqlq "select state from experiments where name = '$1'"
}
sleeping sleeper
kubectl delete exp sleeper --wait=true --timeout=60s >/dev/null 2>&1
check "deleted while live: DELETED in the store, with its end" wait_for 10 n_is DELETED psqlq \
    "select state from experiments where name = 'sleeper' and ended_at is not null"
check "an ended experiment keeps its outcome when deleted" eval \
    'kubectl delete exp early --wait=true --timeout=30s >/dev/null 2>&1 &&
     case "$(psqlq "select state from experiments where name = '"'"'early'"'"'")" in COMPLETED | ERROR) true ;; *) false ;; esac'

sleeping doomed

# /readyz follows the database: 503 naming it while PostgreSQL is down (the pod leaves the Service).
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
stop_pg
check "/readyz answers 503 with the database down" wait_for 20 eval \
    "curl -s '$URL/readyz' | grep -q 'not ready: the database does not answer'"
check "/healthz still answers (liveness does not restart the pod for it)" curl -sf "$URL/healthz"

# An experiment deleted while the database is down keeps its finalizer (its end is not
# recorded yet) and goes soon after the database is back: its failures are retried at
# most 2 s apart, not after the work queue's backoff, which doubles past 20 s after a
# 25-s outage (docs/controller.md).
kubectl delete exp doomed --wait=false >/dev/null 2>&1
check "deleted with the database down: its pods go" wait_for 30 eval \
    '[ -z "$(kubectl get pods -n default -l kdet.io/experiment=doomed -o name 2>/dev/null)" ]'
sleep 25
check "and the experiment stays, as its end is not in the store yet" eval "kubectl get exp doomed >/dev/null 2>&1"
restart_pg
check "the database is back (/readyz 200)" wait_for 20 curl -sf "$URL/readyz"
back=$(date +%s.%N)
check "the experiment deleted during the outage is gone within 6 s" wait_for 6 eval \
    '! kubectl get exp doomed >/dev/null 2>&1'
echo "# gone $(awk -v a="$back" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the database was back"
check "and DELETED in the store, with its end" wait_for 5 n_is DELETED psqlq \
    "select state from experiments where name = 'doomed' and ended_at is not null"
