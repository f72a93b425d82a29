#!/usr/bin/env bash
# adaptive_asha with Determined 0.38's time_metric and max_time on the whole
# stack (a private PostgreSQL, kdet-local, kdet-controller with its API):
# four Core API trials (tests/dtrain/python/e2e_asha.py), two at a time,
# report validations carrying `epochs`; rungs at 2, 4 and 8 epochs. The
# first trial to reach a rung is promoted, the later (no better) ones are
# stopped there through should_preempt(); one completes the top rung; every
# trial and the experiment end COMPLETED.
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"

experiment asha "  entrypoint: /usr/bin/python3 $KD_SRC/tests/dtrain/python/e2e_asha.py
  environment:
    environment_variables: [TMPDIR=$T]
  hyperparameters: {x: {type: double, minval: 0, maxval: 1}}
  searcher: {name: adaptive_asha, metric: validation_loss, smaller_is_better: true,
             time_metric: epochs, max_time: 8, divisor: 2, max_rungs: 3, mode: aggressive,
             max_trials: 4, max_concurrent_trials: 2}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
log "experiment created"
wait_for 240 eval 'exp_state_is asha COMPLETED || exp_state_is asha ERROR'
check "experiment COMPLETED" exp_state_is asha COMPLETED
check "4 trials" test "$(count_trials kdet.io/experiment=asha)" = 4
for i in 1 2 3 4; do
    st=$(field trial asha-$i '{.status.state}')
    tv=$(field trial asha-$i '{.status.latestValidation.timeValue}')
    echo "# asha-$i: $st epochs=$tv $(field trial asha-$i '{.status.message}')"
    check "asha-$i COMPLETED" test "$st" = COMPLETED
done
eid=$(psqlq "select id from experiments where name = 'asha'")
psqlq "select decision, coalesce(reason, '') from events where experiment_id = $eid order by id" |
    sed 's/^/#   /'
n() { psqlq "select count(*) from events where experiment_id = $eid and reason like '$1%'"; }
check "promotions ($(n 'promoted to rung'))" test "$(n 'promoted to rung 1')" -ge 1 -a "$(n 'promoted to rung 2')" -ge 1
check "early stops in rung 0 ($(n 'stopped in rung'))" test "$(n 'stopped in rung 0')" -ge 2
check "one completed the top rung" test "$(n 'completed the top rung: epochs reached')" -ge 1
top=$(for i in 1 2 3 4; do field trial asha-$i '{.status.latestValidation.timeValue}'; echo; done | sort -n | tail -1)
check "the top trial reported 8 epochs or more ($top)" test "${top%.*}" -ge 8
stopped=$(for i in 1 2 3 4; do field trial asha-$i '{.status.latestValidation.timeValue}'; echo; done | sort -n | head -1)
check "a stopped trial ended before max_time ($stopped)" test "${stopped%.*}" -lt 8
