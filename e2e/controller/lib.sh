# Shared helpers of the kdet-controller end-to-end scenarios: a private
# kdet-local (free port, temp data dir, fake GPUs), the CRDs and priority
# classes, kdet-controller, polling helpers, and a cleanup that checks
# nothing is left behind. Sourced by e2e/controller/*.sh.
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
KD_BUILD=${KD_BUILD:-$KD_SRC/build}
PASSED=0
FAILED=0
T=$(mktemp -d /tmp/kdet-e2e-ctrl.XXXXXX)
LOCAL_PID=
CTRL_PID=
export KUBECONFIG=$T/kubeconfig

ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }
check() { d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
log() { echo "# $(date -u +%H:%M:%S) $*"; }

# wait_for SECONDS COMMAND...: poll every 0.2 s until COMMAND succeeds.
wait_for() {
    local limit=$1 i=0
    shift
    while ! "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -ge $((limit * 5)) ] && return 1
        sleep 0.2
    done
    return 0
}

# start_local GPUS [ARGS...]: kdet-local on a free port with GPUS fake GPUs (and ARGS, such as
# --node-cpus 2); CRDs and priority classes applied.
start_local() {
    local gpus=$1
    shift
    PATH=$KD_BUILD/bin:$PATH "$KD_BUILD/bin/kdet-local" --data-dir "$T/data" --port 0 \
        --port-file "$T/port" --kubeconfig-out "$T/kubeconfig" --fake-gpus "$gpus" \
        --node-name kdet-e2e "$@" >"$T/local.log" 2>&1 &
    LOCAL_PID=$!
    wait_for 10 test -s "$T/kubeconfig" || { echo "kdet-local did not start"; tail "$T/local.log"; return 1; }
    wait_for 10 kubectl get nodes kdet-e2e || return 1
    kubectl apply -f "$KD_SRC/crds/" >/dev/null &&
        kubectl apply -f "$KD_SRC/manifests/priorityclasses.yaml" >/dev/null
}

# A private PostgreSQL on a unix socket in $T/pg (as nobody when root: initdb refuses root).
PGB=${KD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
PGDIR=$T/pg
PG_URL="host=$PGDIR user=kdet dbname=kdet"
pgrun() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
# need_pg: whether the server binaries are there (else the scenario is skipped).
need_pg() {
    [ -x "$PGB/initdb" ] && return 0
    echo "SKIP: no PostgreSQL server binaries"
    rm -rf "$T"
    return 1
}
start_pg() {
    mkdir -p "$PGDIR" && chmod 755 "$T"
    [ "$(id -u)" = 0 ] && chown 65534:65534 "$PGDIR"
    pgrun "$PGB/initdb" -D "$PGDIR/data" -U kdet -A trust --no-sync >"$T/initdb.log" 2>&1 || { cat "$T/initdb.log"; return 1; }
    pgrun "$PGB/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w \
        -o "-k $PGDIR -c listen_addresses='' -c fsync=off" start >/dev/null || { cat "$PGDIR/server.log"; return 1; }
    pgrun "$PGB/createdb" -h "$PGDIR" -U kdet kdet || return 1
    log "PostgreSQL up in $PGDIR"
}
stop_pg() { [ -d "$PGDIR/data" ] && pgrun "$PGB/pg_ctl" -D "$PGDIR/data" -m immediate -w stop >/dev/null 2>&1; }
# restart_pg: start the stopped (or killed) PostgreSQL of start_pg again, with its data.
restart_pg() {
    pgrun "$PGB/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w \
        -o "-k $PGDIR -c listen_addresses='' -c fsync=off" start >/dev/null
}
psqlq() { pgrun "$PGB/psql" -h "$PGDIR" -U kdet -d kdet -tAc "$1" 2>/dev/null; }

# start_ctrl [ARGS...]: kdet-controller against that kdet-local (log appended to $T/ctrl.log).
start_ctrl() {
    # --plain-http: the API on 127.0.0.1 without TLS (tests/controller/api/test_api_tls.c and
    # tests/cli/det_deploy.sh cover HTTPS).
    "$KD_BUILD/bin/kdet-controller" --kubeconfig "$T/kubeconfig" --workers 2 --resync 5 --plain-http "$@" \
        >>"$T/ctrl.log" 2>&1 &
    CTRL_PID=$!
}

# start_ctrl_api [ARGS...]: start_ctrl with the API on PostgreSQL and a user token; sets URL
# and exports KDET_API_URL and KDET_API_TOKEN for det.
start_ctrl_api() {
    printf 'e2e-user-token-0123456789abcdef\n' >"$T/user-token"
    start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default \
        --user-token-file "$T/user-token" "$@"
    check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
    URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
    export KDET_API_URL=$URL KDET_API_TOKEN=e2e-user-token-0123456789abcdef
}

stop_ctrl() {
    if [ -n "$CTRL_PID" ]; then
        kill -TERM "$CTRL_PID" 2>/dev/null
        wait "$CTRL_PID" 2>/dev/null
        local st=$?
        CTRL_PID=
        check "kdet-controller stopped cleanly on SIGTERM (status $st)" test "$st" = 0
    fi
}

# field KIND NAME JSONPATH
field() { kubectl get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
exp_state_is() { [ "$(field exp "$1" '{.status.state}')" = "$2" ]; }
trial_state_is() { [ "$(field trial "$1" '{.status.state}')" = "$2" ]; }
task_state_is() { [ "$(field task "$1" '{.status.state}')" = "$2" ]; }
# live_pods [SELECTOR]: trial pods not yet Succeeded/Failed
live_pods() {
    kubectl get pods -l "${1:-kdet.io/trial}" -o \
        'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null |
        grep -cE '^(Pending|Running|)$' | head -1
}
# n_is N COMMAND...: the command prints N (for wait_for, which re-runs it each time).
n_is() {
    local want=$1
    shift
    [ "$("$@")" = "$want" ]
}
count_trials() { kubectl get trial -l "$1" -o name 2>/dev/null | grep -c .; }
count_pods() { kubectl get pods -l "${1:-kdet.io/trial}" -o name 2>/dev/null | grep -c .; }
no_pods() { [ "$(count_pods "${1:-kdet.io/trial}")" = 0 ]; }
running_pods() {
    kubectl get pods -l "${1:-kdet.io/trial}" -o \
        'jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}' 2>>"$T/kubectl.err" | tee -a "$T/phases" | grep -c '=Running$'
}

# experiment NAME EXTRA_SPEC_YAML: apply an Experiment; EXTRA is indented spec YAML.
experiment() {
    printf 'apiVersion: kdet.io/v1alpha1\nkind: Experiment\nmetadata:\n  name: %s\nspec:\n  name: %s\n%s\n' \
        "$1" "$1" "$2" | kubectl apply -f - >/dev/null
}

# fmnist_experiment NAME LEARNING_RATE SEARCHER SLOTS: a small fashion-mnist-c
# Experiment (3200 training and 500 test images, batch 32, 32 hidden units)
# with shared_fs checkpoints in $T/ckpt (created here). LEARNING_RATE is a
# value or a hyperparameter range, SEARCHER a flow mapping, SLOTS its
# slots_per_trial.
fmnist_experiment() {
    mkdir -p "$T/ckpt" # shared_fs: the directory must exist (on a cluster, a mounted volume)
    experiment "$1" "  entrypoint: fashion-mnist-c --train-limit 3200 --test-limit 500 --quiet
  environment:
    environment_variables: [OPENBLAS_NUM_THREADS=1, DTRAIN_TIMEOUT=60, DTRAIN_RENDEZVOUS_TIMEOUT=60, TMPDIR=$T]
  hyperparameters:
    global_batch_size: 32
    hidden_units: 32
    momentum: 0.9
    learning_rate: $2
  searcher: $3
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: $4}"
}

# exp_metrics EXP KIND: how many KIND ('validation', 'training') metric rows
# the store holds for experiment EXP.
exp_metrics() {
    psqlq "select count(*) from metrics m join trials t on t.id = m.trial_id
        join experiments e on e.id = t.experiment_id where e.name = '$1' and m.kind = '$2'"
}

# pod_nodes EXP: the nodes the experiment's pods are bound to, sorted, one a line.
pod_nodes() {
    kubectl get pods -l "kdet.io/experiment=$1" -o \
        'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' 2>/dev/null | grep . | sort
}

# check_multinode_trial EXP NS: the checks of a COMPLETED multi-node
# fashion-mnist-c experiment EXP (one trial, EXP-1) in namespace NS: the
# chief reported its address to the controller API, node rank 1 read it back,
# metrics and a checkpoint were stored.
check_multinode_trial() {
    local e=$1 ns=$2
    check "its trial COMPLETED" trial_state_is "$e-1" COMPLETED
    check "the chief reported its address for the run (status.rendezvous)" test -n \
        "$(field trial "$e-1" '{.status.rendezvous.runId}')"
    check "the chief reported a pod IP and a port" test -n "$(field trial "$e-1" '{.status.rendezvous.address}')" -a \
        "$(field trial "$e-1" '{.status.rendezvous.port}')" -gt 0
    check "the controller logged the report" grep -q "msg=\"rendezvous address reported\" trial=$ns/$e-1 " "$T/ctrl.log"
    check "node rank 1 read it from the controller" grep -q \
        "method=GET path=/api/v1/namespaces/$ns/trials/$e-1/rendezvous status=200" "$T/ctrl.log"
    check "validation metrics stored" test "$(exp_metrics "$e" validation)" -ge 1
    check "training metrics stored" test "$(exp_metrics "$e" training)" -ge 1
    check "latestValidation at 40 batches" test "$(field trial "$e-1" '{.status.latestValidation.batches}')" = 40
    check "a checkpoint was registered" test "$(psqlq "select count(*) from checkpoints c join trials t
        on t.id = c.trial_id join experiments e on e.id = t.experiment_id where e.name = '$e'")" -ge 1
    check "checkpoint files in the storage" test -n "$(ls -A "$T/ckpt" 2>/dev/null)"
}

# check_queued_big EXP SLOTS NODES GPUS: experiment EXP asks for SLOTS, which
# needs NODES nodes of GPUS, more than the cluster has: its trial stays QUEUED
# with the scheduler's reason and no pod.
check_queued_big() {
    check "experiment $1 is ACTIVE, waiting" exp_state_is "$1" ACTIVE
    check "its trial stays QUEUED" trial_state_is "$1-1" QUEUED
    local msg
    msg=$(field trial "$1-1" '{.status.message}')
    echo "# $1-1: $msg"
    check "the reason names what is missing" grep -qF "slots_per_trial=$2 needs $3 nodes with $4 GPUs" <<<"$msg"
    check "no pod was created for it" no_pods "kdet.io/experiment=$1"
}

# trial_procs: the pids of this test's trial processes, wherever they were
# reparented: a trial container's environment has KDET_TRIAL_ID and this
# test's KUBECONFIG (other tests on the machine have their own).
trial_procs() {
    local f files
    files=$(grep -lz '^KDET_TRIAL_ID=' /proc/[0-9]*/environ 2>/dev/null)
    [ -n "$files" ] || return 0
    for f in $(grep -lzxF "KUBECONFIG=$T/kubeconfig" $files 2>/dev/null); do
        f=${f#/proc/}
        echo "${f%/environ}"
    done
}

finish() {
    stop_ctrl
    if [ -n "$LOCAL_PID" ]; then
        kill -TERM "$LOCAL_PID" 2>/dev/null
        wait "$LOCAL_PID" 2>/dev/null
    fi
    sleep 0.5
    local left
    left=$(trial_procs)
    if pgrep -f "$T" >/dev/null 2>&1 || [ -n "$left" ]; then
        bad "processes left behind: $(pgrep -af "$T" | head -3) $(for p in $left; do ps -o pid=,args= -p "$p"; done | head -3)"
        pkill -KILL -f "$T" 2>/dev/null # only processes of this test's own temp dir
        for p in $left; do kill -KILL "$p" 2>/dev/null; done
    else
        ok "no process left behind"
    fi
    if grep -qE 'Sanitizer|runtime error:' "$T/ctrl.log" 2>/dev/null; then
        bad "sanitizer report in the controller log"
        grep -A15 -E 'Sanitizer|runtime error:' "$T/ctrl.log" | head -40
    fi
    if [ "$FAILED" -gt 0 ]; then
        echo "---- controller log (tail)"
        tail -40 "$T/ctrl.log" 2>/dev/null
        echo "---- kubectl errors"
        sort "$T/kubectl.err" 2>/dev/null | uniq -c | head -5
        sort "$T/phases" 2>/dev/null | uniq -c | head -8
        echo "---- kdet-local log (pods, first lines)"
        grep -E 'msg="(pod|container)' "$T/local.log" 2>/dev/null | head -30
        echo "---- kdet-local log (tail)"
        tail -15 "$T/local.log" 2>/dev/null
    fi
    [ -n "${KEEP_T:-}" ] || rm -rf "$T"
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}
