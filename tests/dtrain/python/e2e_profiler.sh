#!/usr/bin/env bash
# The profiler on the whole stack (a private PostgreSQL, kdet-local,
# kdet-controller with its API): a det.pytorch.Trainer trial
# (tests/dtrain/python/e2e_trainer.py) of an experiment with
# `profiling: {enabled: true}` and a searcher without max_length. The
# Trainer's own fit(max_length=Batch(60)) ends it (COMPLETED at 60 batches),
# its pod got KDET_PROFILING, the store holds system samples and the
# Trainer's timings, and `det trial profiler` prints them (tables, --kind,
# -o json).
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 1 || exit 1
printf 'e2e-user-token-0123456789abcdef\n' >"$T/user-token"
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default \
    --user-token-file "$T/user-token"
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
export KDET_API_URL=$URL KDET_API_TOKEN=e2e-user-token-0123456789abcdef
DET=$KD_BUILD/bin/det
mkdir -p "$T/ckpt"

experiment prof "  entrypoint: /usr/bin/python3 $KD_SRC/tests/dtrain/python/e2e_trainer.py
  environment:
    environment_variables: [OMP_NUM_THREADS=1, TMPDIR=$T]
  hyperparameters: {global_batch_size: 8}
  searcher: {name: single, metric: validation_loss, smaller_is_better: true}
  profiling: {enabled: true, begin_on_batch: 0, end_after_batch: 1000}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
log "experiment created"
check "the pod gets KDET_PROFILING" wait_for 60 eval \
    "kubectl get pods -l kdet.io/trial=prof-1 -o yaml | grep -q KDET_PROFILING"
wait_for 180 eval 'exp_state_is prof COMPLETED || exp_state_is prof ERROR'
check "experiment COMPLETED" exp_state_is prof COMPLETED
msg=$(field trial prof-1 '{.status.message}')
echo "# prof-1: $msg"
check "the training code ended it (no length from the searcher)" grep -q "the training code ended it" <<<"$msg"
check "fit's max_length capped it: validated at 60 batches" test \
    "$(field trial prof-1 '{.status.latestValidation.batches}')" = 60
tid=$(psqlq "select id from trials where uid = '$(field trial prof-1 '{.metadata.uid}')'")
check "training rows at 20, 40, 60" test "$(psqlq "select string_agg(step::text, ' ' order by step)
    from metrics where trial_id = $tid and kind = 'training'")" = "20 40 60"
nsys=$(psqlq "select count(*) from metrics where trial_id = $tid and kind = 'profiling'
    and metrics->>'group' = 'system' and (metrics->>'cpu_util_pct')::float between 0 and 100
    and (metrics->>'memory_used_bytes')::bigint > 0")
check "system samples stored ($nsys)" test "${nsys:-0}" -ge 1
check "timings stored at 20, 40, 60" test "$(psqlq "select string_agg(step::text, ' ' order by step)
    from metrics where trial_id = $tid and kind = 'profiling' and metrics->>'group' = 'timing'
    and (metrics->>'train_batch')::float >= 0.04 and metrics ? 'dataloader_next'
    and metrics ? 'reduce_metrics'")" = "20 40 60"

"$DET" trial profiler prof-1 >"$T/prof.out" 2>&1
rc=$?
sed 's/^/#   /' "$T/prof.out"
check "det trial profiler exits 0" test $rc = 0
check "it prints the system samples" grep -q "^TIME .*CPU .*MEM USED .*NET RECV" "$T/prof.out"
check "and the timings" grep -q "^BATCHES .*dataloader_next .*train_batch" "$T/prof.out"
check "a timing row at 60 batches with train_batch in ms" \
    grep -qE "^60 .* [0-9.]+ms .*[0-9.]+ms" "$T/prof.out"
"$DET" trial profiler "$tid" --kind timing -o json >"$T/prof.json" 2>&1
check "-o json by integer id: the timings only" /usr/bin/python3 -c "
import json, sys
o = json.load(open('$T/prof.json'))
t = o['timing']
assert 'system' not in o and [r['step'] for r in t] == [20, 40, 60], o
assert all(r['metrics']['group'] == 'timing' and r['metrics']['batches'] == 20 for r in t), t
"
"$DET" trial profiler prof-1 --kind system --tail 1 >"$T/one.out" 2>&1
check "--kind system --tail 1: one row" test "$(grep -c . "$T/one.out")" = 2
"$DET" trial profiler prof-1 --kind disk >"$T/bad.out" 2>&1
check "--kind disk is a usage error" test $? = 2
