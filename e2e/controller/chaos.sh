#!/usr/bin/env bash
# kill -9 of kdet-controller and of PostgreSQL at random points while a real
# experiment runs (fashion-mnist-c, random search, 3 trials, 2 at a time,
# 48000 batches, a checkpoint every 16000, the API on a fixed port, the metrics
# spool on disk). The same experiment (same seed) runs undisturbed first.
# Afterwards: the disturbed run COMPLETED with the same searcher decisions
# (trials, hyperparameters, seeds, targets); every metric the workers sent
# is in PostgreSQL, none twice from one attempt (the rows and values equal
# the undisturbed run's, and the validations equal what the workers
# printed; a step trained again after a resume from an earlier checkpoint
# is reported again by the new attempt, with the same values); checkpoint
# GC (policy: only the experiment's best) left exactly that checkpoint in
# the registry and in storage, with one event per deletion.
# KD_CHAOS_KILLS (default 4) bounds the kills.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
KILLS=${KD_CHAOS_KILLS:-4}
start_pg || exit 1
start_local 2 || exit 1
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ctrl() { start_ctrl --database-url "$PG_URL" --api-listen "127.0.0.1:$PORT" --namespace default --spool-dir "$T/spool"; }
mkdir -p "$T/spool"
ctrl
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"

# The worker: fashion-mnist-c with its output kept per attempt (what the worker sent).
cat >"$T/run.sh" <<'W'
exec fashion-mnist-c "$@" >>"$OUTDIR/out-$KDET_TRIAL_ID-$KDET_RUN_ID"
W
spec() {
    mkdir -p "$T/ckpt-$1"
    experiment "$1" "  entrypoint: sh $T/run.sh --train-limit 3200 --test-limit 500 --report-every 2000 --checkpoint-period 16000
  environment:
    environment_variables: [OPENBLAS_NUM_THREADS=1, DTRAIN_TIMEOUT=120, TMPDIR=$T, OUTDIR=$T/out-$1]
  hyperparameters:
    global_batch_size: 32
    hidden_units: 64
    momentum: 0.9
    learning_rate: {type: double, minval: 0.01, maxval: 0.1}
  searcher: {name: random, metric: validation_loss, smaller_is_better: true, max_trials: 3,
             max_concurrent_trials: 2, max_length: {batches: 48000}}
  reproducibility: {experiment_seed: 777}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt-$1, save_experiment_best: 1,
                       save_trial_best: 0, save_trial_latest: 0}
  max_restarts: 5
  resources: {slots_per_trial: 1}"
    mkdir -p "$T/out-$1"
}
done_or_failed() { exp_state_is "$1" COMPLETED || exp_state_is "$1" ERROR || exp_state_is "$1" CANCELED; }
decisions() {
    kubectl get trial -l "kdet.io/experiment=$1" -o \
        'jsonpath={range .items[*]}{.spec.requestId} {.spec.seed} {.spec.validateAfter} {.spec.hparams}{"\n"}{end}' | sort
}
# metric rows: request id, kind, step, the values (a step a later attempt trained again after
# resuming from an earlier checkpoint is reported again, with the same values)
metric_rows() {
    psqlq "select distinct t.request_id, m.kind, m.step, m.metrics::text from metrics m
        join trials t on t.id = m.trial_id join experiments x on x.id = t.experiment_id
        where x.name = '$1' order by 1, 2, 3"
}
# rows stored twice by one attempt (the run id starts every batch key): must be none
twice() {
    psqlq "select t.request_id, m.kind, m.step, split_part(m.batch_key, '-r', 1) from metrics m
        join trials t on t.id = m.trial_id join experiments x on x.id = t.experiment_id
        where x.name = '$1' group by 1, 2, 3, 4 having count(*) > 1"
}
retrained() {
    psqlq "select count(*) from (select 1 from metrics m join trials t on t.id = m.trial_id
        join experiments x on x.id = t.experiment_id where x.name = '$1'
        group by t.id, m.kind, m.step having count(*) > 1) d"
}
ckpts() { psqlq "select coalesce(string_agg(c.uuid, ' ' order by c.uuid), '') from checkpoints c join trials t on t.id = c.trial_id
    join experiments x on x.id = t.experiment_id where x.name = '$1' and c.state = '$2'"; }
# The policy's answer from the registry: the checkpoint whose step has the best validation.
expected_best() {
    psqlq "select c.uuid from checkpoints c join trials t on t.id = c.trial_id
        join experiments x on x.id = t.experiment_id
        join metrics m on m.trial_id = c.trial_id and m.kind = 'validation' and m.step = c.steps_completed
        where x.name = '$1' order by (m.metrics->>'validation_loss')::float8, c.steps_completed, c.uuid limit 1"
}
on_disk() { (cd "$T/ckpt-$1" && ls -d */ 2>/dev/null | tr -d / | grep -v kdtmp | grep -vx tensorboard | sort | tr '\n' ' ' | sed 's/ $//'); }

spec calm
log "undisturbed run"
wait_for 150 done_or_failed calm
check "undisturbed run COMPLETED" exp_state_is calm COMPLETED
check "undisturbed: GC left the experiment's best only" wait_for 20 eval \
    '[ "$(ckpts calm ACTIVE)" = "$(expected_best calm)" ]'

kill_pg() {
    local pid kids
    pid=$(head -1 "$PGDIR/data/postmaster.pid" 2>/dev/null)
    [ -n "$pid" ] || return 0
    kids=$(pgrep -P "$pid" | tr '\n' ' ')
    kill -9 "$pid" $kids 2>/dev/null
    wait_for 10 eval "! kill -0 $pid 2>/dev/null"
}
kill_ctrl() {
    kill -9 "$CTRL_PID" 2>/dev/null
    wait "$CTRL_PID" 2>/dev/null
    CTRL_PID=
}

spec storm
log "disturbed run: $KILLS kills"
for i in $(seq 1 "$KILLS"); do
    sleep "$((RANDOM % 3 + 1)).$((RANDOM % 10))"
    done_or_failed storm && break
    case $((i % 3)) in
    1)
        log "kill -9 kdet-controller"
        kill_ctrl
        sleep "0.$((RANDOM % 10))"
        ctrl
        ;;
    2)
        log "kill -9 PostgreSQL"
        kill_pg
        sleep "$((RANDOM % 3)).$((RANDOM % 10))"
        restart_pg || log "PostgreSQL did not restart"
        ;;
    0)
        log "kill -9 kdet-controller and PostgreSQL"
        kill_ctrl
        kill_pg
        sleep "$((RANDOM % 2)).$((RANDOM % 10))"
        restart_pg || log "PostgreSQL did not restart"
        ctrl
        ;;
    esac
    echo "$i" >>"$T/kills"
done
check "the disturbed run was killed at least twice" test "$(wc -l <"$T/kills" 2>/dev/null || echo 0)" -ge 2
wait_for 180 done_or_failed storm
check "disturbed run COMPLETED" exp_state_is storm COMPLETED
decisions calm >"$T/d-calm"
decisions storm >"$T/d-storm"
check "3 trials" test "$(wc -l <"$T/d-storm")" = 3
check "identical searcher decisions (request ids, seeds, targets, hyperparameters)" diff "$T/d-calm" "$T/d-storm"
check "metrics stored" wait_for 20 eval '[ -n "$(metric_rows storm)" ]'
metric_rows calm >"$T/m-calm"
metric_rows storm >"$T/m-storm"
check "no metric row stored twice by one attempt" test -z "$(twice storm)$(twice calm)"
check "no step with two different values" test -z "$(cut -d'|' -f1-3 "$T/m-storm" | uniq -d)"
check "the same metric rows and values as the undisturbed run (none lost)" diff "$T/m-calm" "$T/m-storm"
# What the workers printed: "validation batches=N validation_loss=X ..." per trial.
sent=$(for f in "$T"/out-storm/out-*; do
    tr=$(basename "$f" | sed 's/^out-\(storm-[0-9]*\)-.*/\1/')
    sed -n "s/^validation batches=\([0-9]*\) validation_loss=\([^ ]*\) .*/$tr \1 \2/p" "$f"
done | sort -u)
stored=$(psqlq "select t.uid, m.step, m.metrics->>'validation_loss' from metrics m join trials t on t.id = m.trial_id
    join experiments x on x.id = t.experiment_id where x.name = 'storm' and m.kind = 'validation'" |
    while IFS='|' read -r uid step v; do
        echo "$(kubectl get trial -l kdet.io/experiment=storm -o "jsonpath={range .items[?(@.metadata.uid==\"$uid\")]}{.metadata.name}{end}") $step $v"
    done | sort -u)
check "validations stored = validations the workers sent" test -n "$sent" -a "$sent" = "$stored"
best=$(expected_best storm)
check "GC: only the experiment's best checkpoint ACTIVE" wait_for 20 eval '[ -n "$best" ] && [ "$(ckpts storm ACTIVE)" = "$best" ]'
check "GC: storage holds exactly that checkpoint" test "$(on_disk storm)" = "$best"
check "GC: one event per deleted checkpoint" test "$(psqlq "select count(*) from events e join experiments x
    on x.id = e.experiment_id where x.name = 'storm' and e.kind = 'checkpoint_gc'")" = \
    "$(ckpts storm DELETED | wc -w)"
check "trial states in the store" test "$(psqlq "select string_agg(distinct t.state, ' ') from trials t
    join experiments x on x.id = t.experiment_id where x.name = 'storm'")" = COMPLETED
check "experiment state in the store" test "$(psqlq "select state from experiments where name = 'storm'")" = COMPLETED
echo "# steps reported again after a resume: calm $(retrained calm), storm $(retrained storm)"
echo "# kills: $(wc -l <"$T/kills"); controller starts: $(grep -c 'msg="API serving"' "$T/ctrl.log");" \
    "trial restarts: $(kubectl get trial -l kdet.io/experiment=storm -o 'jsonpath={range .items[*]}{.status.restarts} {end}')"
