#!/usr/bin/env bash
# Checkpoint GC run by kdet-controller, and what it records when trials and
# experiments end. A shell worker on the API saves real checkpoints
# (dtrain ckpt upload to shared_fs) at 10, 20 and 30 batches with
# validations at each (loss lr+0.5, lr, lr+0.05: the best is at 20, the
# latest at 30), and registers them. Under Determined's default policy
# (0/1/1) each trial keeps its best and its latest; with 1/0/0 only the
# experiment's best is left, and a trial that is still running keeps all
# of its checkpoints until it ends. Deletions are files first, then the
# registry (DELETED plus one checkpoint_gc event each); a restarted
# controller repeats GC without recording anything twice, and finishes a
# deletion left half done (files gone, row still ACTIVE). On S3 (s3rver)
# the controller takes the keys from checkpoint_storage.credentials_secret
# (for GC and for a download through the API) and logs none of them. Also: trial and
# experiment states in the store, status.bestValidation, and a
# spec.template naming no stored template is a configuration error. A
# registry row whose uuid no storage path may be built from is retired
# once (files untouched) and GC goes on with the others.
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 4 || exit 1
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
: >"$T/names"

cp "$KD_SRC/tests/controller/support/ckpt_worker.sh" "$T/worker.sh"

# gc_exp NAME POLICY [HOLD [STORAGE [ENV]]]: a grid of three trials over shared_fs $T/ckpt-NAME
# (or the checkpoint_storage fields STORAGE, with ENV for the workers).
gc_exp() {
    mkdir -p "$T/ckpt-$1"
    experiment "$1" "  entrypoint: sh $T/worker.sh
  environment:
    environment_variables: [OUTDIR=$T, DTRAIN=$KD_BUILD/bin/dtrain, CKPT=$T/ckpt-$1, HOLD=${3:-}${5:+, $5}]
  hyperparameters:
    lr: {type: categorical, vals: [0.1, 0.2, 0.3]}
  searcher: {name: grid, metric: loss, smaller_is_better: true, max_length: {batches: 30}}
  checkpoint_storage: {${4:-type: shared_fs, host_path: $T/ckpt-$1}, $2}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
}
# names: the uuids on stdin (whitespace-separated) as the workers' TRIAL-STEP names, sorted,
# on one line; a uuid no worker made stays as it is. uuid_of NAME: the other way.
names() { tr -s ' \n' '\n\n' | awk 'NR == FNR { m[$1] = $2; next } NF { print ($1 in m) ? m[$1] : $1 }' \
    "$T/names" - | sort | tr '\n' ' ' | sed 's/ $//'; }
uuid_of() { awk -v n="$1" '$2 == n { print $1; exit }' "$T/names"; }
ckpts() { psqlq "select string_agg(c.uuid, ' ' order by c.uuid) from checkpoints c join trials t on t.id = c.trial_id
    join experiments x on x.id = t.experiment_id where x.name = '$1' and c.state = '$2'" | names; }
# (the event files of docs/tasks.md, "TensorBoards", live beside the checkpoints in tensorboard/)
on_disk() { (cd "$T/ckpt-$1" && ls -d */ 2>/dev/null | tr -d / | grep -vx tensorboard | names); }
gc_events() { psqlq "select count(*) from events e join experiments x on x.id = e.experiment_id
    where x.name = '$1' and e.kind = 'checkpoint_gc' and e.decision = 'delete'"; }

# Determined's default policy: each trial's best (20) and latest (30).
gc_exp dflt "save_experiment_best: 0, save_trial_best: 1, save_trial_latest: 1"
check "default-policy experiment COMPLETED" wait_for 90 exp_state_is dflt COMPLETED
keep="dflt-1-20 dflt-1-30 dflt-2-20 dflt-2-30 dflt-3-20 dflt-3-30"
check "registry: each trial's best and latest ACTIVE" wait_for 20 n_is "$keep" ckpts dflt ACTIVE
check "registry: the others DELETED" test "$(ckpts dflt DELETED)" = "dflt-1-10 dflt-2-10 dflt-3-10"
check "storage: exactly the kept checkpoints" test "$(on_disk dflt)" = "$keep"
check "one checkpoint_gc event per deletion" test "$(gc_events dflt)" = 3
check "trial states in the store" test "$(psqlq "select string_agg(t.state, ' ') from trials t join experiments x \
    on x.id = t.experiment_id where x.name = 'dflt'")" = "COMPLETED COMPLETED COMPLETED"
check "experiment state in the store, with its end time" test "$(psqlq "select state || ' ' || (ended_at is not null) \
    from experiments where name = 'dflt'")" = "COMPLETED true"
check "status.bestValidation: the best trial" test \
    "$(field exp dflt '{.status.bestValidation.trial} {.status.bestValidation.metric} {.status.bestValidation.value} {.status.bestValidation.batches}')" = \
    "dflt-1 loss 0.1 20"
check "kubectl get exp shows the best value" eval "kubectl get exp dflt | grep -qE '[[:space:]]0\.1[[:space:]]'"

# Only the experiment's best; dexp-3 is held after its last checkpoint: while it runs, GC (run as
# the others end) leaves every checkpoint of it alone.
gc_exp dexp "save_experiment_best: 1, save_trial_best: 0, save_trial_latest: 0" dexp-3
check "two trials of three COMPLETED" wait_for 90 n_is 2 eval "kubectl get trial -l kdet.io/experiment=dexp \
    -o 'jsonpath={range .items[*]}{.status.state}{\"\\n\"}{end}' | grep -c '^COMPLETED$'"
check "GC of the ended trials: only the experiment's best of them left" wait_for 20 n_is \
    "dexp-1-20 dexp-3-10 dexp-3-20 dexp-3-30" ckpts dexp ACTIVE
check "the running trial's checkpoints all on disk" test "$(on_disk dexp)" = "dexp-1-20 dexp-3-10 dexp-3-20 dexp-3-30"
# A row whose uuid names a path outside the storage (as the API once let a trial register
# ../../../../tmp/x), written into the store by hand: GC retires it once, touches no file for it,
# and still collects the others; the experiment still ends in the store.
psqlq "insert into checkpoints (uuid, trial_id, steps_completed, storage_path, size_bytes)
    select '../../../../tmp/x', t.id, 5, '../../../../tmp/x', 1 from trials t
    join experiments x on x.id = t.experiment_id where x.name = 'dexp' order by t.id limit 1" >/dev/null
check "the bad row is in the store" test "$(psqlq "select state from checkpoints where uuid = '../../../../tmp/x'")" = ACTIVE
touch "$T/release"
check "experiment-best experiment COMPLETED" wait_for 60 exp_state_is dexp COMPLETED
check "at the end only the experiment's best is left" wait_for 20 n_is "dexp-1-20" ckpts dexp ACTIVE
check "storage: only the experiment's best" test "$(on_disk dexp)" = "dexp-1-20"
check "one event per deletion" test "$(psqlq "select count(*) from events e join experiments x on x.id = e.experiment_id
    where x.name = 'dexp' and e.kind = 'checkpoint_gc' and e.details->>'invalid_uuid' is null")" = 8
check "the bad row retired with one event saying its files were left alone" test \
    "$(psqlq "select c.state || ' ' || count(e.id) || ' ' || min(e.details->>'files_deleted') from checkpoints c
    left join events e on e.kind = 'checkpoint_gc' and e.details->>'uuid' = c.uuid
    where c.uuid = '../../../../tmp/x' group by c.state")" = "DELETED 1 false"
check "the bad row warned about once" test "$(grep -c 'checkpoint GC: skipped a checkpoint with an invalid uuid' "$T/ctrl.log")" = 1
check "the experiment ended in the store" wait_for 20 eval \
    "[ \"\$(psqlq \"select state from experiments where name = 'dexp'\")\" = COMPLETED ]"
check "GC logged" grep -q 'msg="checkpoint GC" experiment=dexp' "$T/ctrl.log"

# A restarted controller runs GC again over the ended experiments: nothing new to delete or record.
stop_ctrl
# As if the controller had been killed after deleting dflt-1-10's files and before the registry
# said so: the row is ACTIVE again and its event gone; the next controller must finish the job.
u=$(uuid_of dflt-1-10)
psqlq "update checkpoints set state = 'ACTIVE', deleted_at = null where uuid = '$u';
    delete from events where kind = 'checkpoint_gc' and details->>'uuid' = '$u'" >/dev/null
check "a deletion left half done (files gone, row ACTIVE)" test "$(gc_events dflt)" = 2
nlog=$(wc -l <"$T/ctrl.log")
# (with a user token, for the download below)
printf 'gc-user-token-0123456789abcdef\n' >"$T/user-token"
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default --user-token-file "$T/user-token"
check "API serving after a restart" wait_for 20 n_is 2 grep -c 'msg="API serving"' "$T/ctrl.log"
check "the restarted controller looked at the ended experiments" wait_for 20 eval \
    "tail -n +$nlog '$T/ctrl.log' | grep -q 'msg=\"checkpoint GC\" experiment=dexp checkpoints=1 deleted=0'"
check "the half-done deletion finished" wait_for 20 eval "tail -n +$nlog '$T/ctrl.log' |
    grep -q 'msg=\"checkpoint GC\" experiment=dflt checkpoints=7 deleted=1'"
check "no deletion recorded twice, none lost" test "$(gc_events dflt) $(gc_events dexp)" = "3 9"
check "registry: the same three DELETED" test "$(ckpts dflt DELETED)" = "dflt-1-10 dflt-2-10 dflt-3-10"
check "still exactly the kept checkpoints" test "$(ckpts dexp ACTIVE) / $(on_disk dflt)" = "dexp-1-20 / $keep"

# S3 (s3rver): the controller reads the keys from checkpoint_storage.credentials_secret (the workers
# get theirs from their environment) and never logs them.
S3RVER=$KD_SRC/.deps/s3rver/node_modules/.bin/s3rver
if [ -x "$S3RVER" ]; then
    s3port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$T/s3"
    NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$s3port" --silent \
        --configure-bucket ckpts >"$T/s3rver.log" 2>&1 &
    S3PID=$!
    wait_for 10 eval "(exec 3<>/dev/tcp/127.0.0.1/$s3port) 2>/dev/null"
    kubectl create secret generic s3-creds --from-literal=AWS_ACCESS_KEY_ID=S3RVER \
        --from-literal=AWS_SECRET_ACCESS_KEY=S3RVER >/dev/null
    gc_exp s3gc "save_experiment_best: 0, save_trial_best: 1, save_trial_latest: 0" "" \
        "type: s3, bucket: ckpts, prefix: gc, endpoint_url: 'http://127.0.0.1:$s3port', credentials_secret: s3-creds" \
        "AWS_ACCESS_KEY_ID=S3RVER, AWS_SECRET_ACCESS_KEY=S3RVER"
    check "S3 experiment COMPLETED" wait_for 90 exp_state_is s3gc COMPLETED
    check "S3 registry: each trial's best ACTIVE" wait_for 20 n_is "s3gc-1-20 s3gc-2-20 s3gc-3-20" ckpts s3gc ACTIVE
    s3ls() { AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "$KD_BUILD/bin/dtrain" ckpt ls \
        --storage s3://ckpts/gc --endpoint-url "http://127.0.0.1:$s3port" 2>&1; }
    check "S3 storage: exactly the kept checkpoints" test "$(s3ls | grep ' complete ' | awk '{print $1}' |
        names)" = "s3gc-1-20 s3gc-2-20 s3gc-3-20"
    check "S3: one event per deletion" test "$(gc_events s3gc)" = 6
    # A kept checkpoint downloaded through the API (docs/api.md, "Downloads"): the controller
    # reads it with the Secret's keys as GC does; the archive holds the worker's file.
    URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
    U=$(uuid_of s3gc-2-20)
    s3dl() { curl -s -o "$T/s3dl.tar" -D "$T/s3dl.head" -w '%{http_code}' -H 'Authorization: Bearer gc-user-token-0123456789abcdef' \
        "$URL/api/v1/namespaces/default/checkpoints/$U/download"; }
    check "S3: GET .../checkpoints/UUID/download through the controller: 200" test "$(s3dl)" = 200
    check "... a tar named UUID.tar with its length" eval "grep -qi 'content-disposition: attachment; filename=\"$U.tar\"' '$T/s3dl.head' &&
        grep -qi \"^content-length: \$(stat -c %s '$T/s3dl.tar')\" '$T/s3dl.head'"
    mkdir -p "$T/s3x"
    check "... holding the worker's model.bin, byte for byte, and nothing else" eval "tar -xf '$T/s3dl.tar' -C '$T/s3x' &&
        cmp '$T/s3x/$U/model.bin' '$T/w/$U/model.bin' && [ \"\$(cd '$T/s3x/$U' && find . -type f)\" = ./model.bin ]"
    check "S3: no credentials in the controller log" eval "! grep -q S3RVER '$T/ctrl.log'"
    kill "$S3PID" 2>/dev/null
    wait "$S3PID" 2>/dev/null
else
    bad "s3rver is not installed ($S3RVER): run make deps"
fi

# spec.template naming no stored template: a configuration error quoting the name.
experiment notmpl "  template: no-such-template
  entrypoint: sh $T/worker.sh
  searcher: {name: single, metric: loss, max_length: {batches: 30}}
  resources: {slots_per_trial: 1}"
check "missing template: experiment ERROR" wait_for 20 exp_state_is notmpl ERROR
check "missing template: condition quotes the template" eval "field exp notmpl \
    '{.status.conditions[?(@.type==\"Valid\")].message}' | grep -q 'template no-such-template not found'"
check "missing template: reason TemplateNotFound" test \
    "$(field exp notmpl '{.status.conditions[?(@.type=="Valid")].reason}')" = TemplateNotFound
check "missing template: no trial" test "$(count_trials kdet.io/experiment=notmpl)" = 0
