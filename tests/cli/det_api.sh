#!/bin/bash
# det's verbs that read kdet-controller's user API, and the job and GC-policy
# verbs that patch Experiments, against a real 'det deploy local up'
# (kdet-local, a private PostgreSQL, kdet-controller with the API and a user
# token det finds by itself). A shell worker reports known training and
# validation metrics and registers a checkpoint written with lib/storage;
# det trial metrics / checkpoint list|describe|download must give them back
# exactly. Then the queue: det job update moves experiments in the
# Experiment resources and in det job list. Token errors are checked too.
set -u
build=${KD_BUILD:-$PWD/build}
cd "${KD_SRC:-.}"
det=$build/bin/det
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | head -30; fail=$((fail + 1)); }
# check NAME COMMAND...: ok when the command succeeds
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n" "$tmp/out"; fi; }

if ! command -v kubectl >/dev/null || ! command -v curl >/dev/null || ! command -v python3 >/dev/null ||
    ! { command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }; then
    echo "skip: kubectl, curl, python3 or PostgreSQL is not installed"; echo "1 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d /tmp/kd-det-api-XXXXXX)
dd=$tmp/data
cleanup() {
    timeout 60 "$det" deploy local down --data-dir "$dd" > /dev/null 2>&1
    for f in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' 2>/dev/null < "$f" | grep -qF -- "$tmp" && kill -9 "${f//[^0-9]/}" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"
unset KDET_API_URL KDET_API_TOKEN KDET_API_TOKEN_FILE KDET_API_CA_FILE
export KDET_LOGIN_FILE=$tmp/login/user-token
# json FILE PYTHON-EXPR: evaluate EXPR with j = the parsed file
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# ---- nothing configured: a clear message
KDET_DATA_DIR=$tmp/none "$det" trial metrics t-1 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "det trial metrics needs the controller API: run det deploy local up, or set KDET_API_URL and KDET_API_TOKEN" "$tmp/out" &&
    ok "no API configured: exit 4 and what to do" || bad "no API configured (exit $rc)" "$tmp/out"
KDET_API_URL=http://127.0.0.1:9 "$det" checkpoint list e > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "needs a user token: run det user login, or set KDET_API_TOKEN (or KDET_API_TOKEN_FILE)" "$tmp/out" &&
    ok "a URL without a token: exit 4 naming what to do" || bad "URL without token (exit $rc)" "$tmp/out"

# ---- deploy: a user token in a 0600 file, the API URL recorded
if ! timeout 120 "$det" deploy local up --data-dir "$dd" --port 0 --gpus 2 > "$tmp/up.out" 2> "$tmp/up.err"; then
    bad "deploy local up" "$tmp/up.err"; echo "$pass passed, $fail failed"; exit 1
fi
ok "deploy local up"
eval "$(cat "$tmp/up.out")"
token=$(cat "$dd/user-token")
[ "$(stat -c %a "$dd/user-token")" = 600 ] && [ ${#token} -ge 32 ] && ok "user token: mode 0600, 32+ characters" ||
    bad "user token file"
grep -q "^export KDET_API_URL=https://127.0.0.1:[0-9]* KDET_API_TOKEN_FILE=$dd/user-token KDET_API_CA_FILE=$dd/controller.crt$" "$tmp/up.out" &&
    ok "up prints KDET_API_URL (https), the token file's name and the CA det trusts" || bad "export KDET_API_URL line" "$tmp/up.out"
[ "$(stat -c %a "$dd/controller.key")" = 600 ] && [ "$(stat -c %a "$dd/controller.crt")" = 644 ] &&
    ok "the controller's certificate 0644, its key 0600" || bad "controller certificate modes"
kcurl() { curl --cacert "$dd/controller.crt" "$@"; }
code=$(curl -s -o /dev/null -w '%{http_code}' "$KDET_API_URL/healthz")
[ "$code" = 000 ] && ok "the controller API's certificate is not trusted without its CA" || bad "healthz without the CA: HTTP $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "${KDET_API_URL/https/http}/healthz")
[ "$code" = 000 ] && ok "no plain HTTP on the controller API's port" || bad "plain HTTP healthz: HTTP $code"
grep -qF -- "$token" "$tmp/up.out" "$tmp/up.err" && bad "up printed the token" || ok "up does not print the token"
for _ in $(seq 150); do kcurl -sf "$KDET_API_URL/healthz" > /dev/null && break; sleep 0.2; done
"$det" deploy local status --data-dir "$dd" > "$tmp/out" 2>&1 &&
    grep -qE "^  controller-api +healthy +$KDET_API_URL, user token in $dd/user-token$" "$tmp/out" &&
    ok "status: the controller API healthy, its URL and the token file" || bad "status controller-api" "$tmp/out"
grep -qE "^  web-ui +serving +$KDET_API_URL/$" "$tmp/out" && ok "status: the web UI's URL" || bad "status web-ui" "$tmp/out"
grep -qF "det: web UI at $KDET_API_URL/ (log in with the token in $dd/user-token" "$tmp/up.err" &&
    ok "up prints the web UI's URL and where the token is" || bad "up: the web UI's URL" "$tmp/up.err"
code=$(kcurl -s -o "$tmp/ui.html" -w '%{http_code}' "$KDET_API_URL/")
[ "$code" = 200 ] && grep -q 'src="ui/app.js"' "$tmp/ui.html" && ok "the printed URL serves the web UI" ||
    bad "the web UI's URL answered $code" "$tmp/ui.html"
code=$(kcurl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/jobs")
[ "$code" = 200 ] && ok "the controller serves the user API with that token" || bad "user API answered $code"

# ---- a checkpoint in shared_fs storage, written with lib/storage (manifest and hashes)
mkdir -p "$tmp/model/sub" "$tmp/ckpt"
echo "weights v1" > "$tmp/model/w.txt"
head -c 300000 /dev/urandom > "$tmp/model/sub/big.bin"
"$build/bin/dtrain" ckpt --storage "file://$tmp/ckpt" --quiet upload "$tmp/model" --uuid c0ffee00-0000-4000-8000-000000000001 > "$tmp/out" 2>&1 ||
    bad "dtrain ckpt upload" "$tmp/out"
size=$(du -sb "$tmp/model" | cut -f1)

# ---- an experiment whose worker reports known metrics and registers that checkpoint
cat > "$tmp/worker.sh" <<'W'
H="Authorization: Bearer $KDET_TOKEN"
# The controller's CA, as every trial pod gets it (KDET_CONTROLLER_CA, from the token Secret).
[ -n "${KDET_CONTROLLER_CA:-}" ] || { echo "no KDET_CONTROLLER_CA" >&2; exit 1; }
CA=$(mktemp)
trap 'rm -f "$CA"' EXIT
printf '%s\n' "$KDET_CONTROLLER_CA" > "$CA"
curl() { command curl --cacert "$CA" "$@"; }
B="$KDET_CONTROLLER_URL/api/v1/namespaces/$KDET_NAMESPACE/trials/$KDET_TRIAL_ID"
done=0
while :; do
    op=$(curl -sf -H "$H" "$B/searcher/operation?completed=$done&timeout=10") || exit 1
    case "$op" in
    *'"stop"'*) exit 0 ;;
    *validate_after*) ;;
    *) continue ;;
    esac
    len=$(echo "$op" | sed 's/.*"length": *\([0-9]*\).*/\1/')
    curl -sf -H "$H" -X POST -d "{\"kind\":\"training\",\"key\":\"t-$len\",\"rows\":[
        {\"batches\":10,\"metrics\":{\"loss\":0.5,\"acc\":0.61}},
        {\"batches\":20,\"metrics\":{\"loss\":0.4,\"acc\":0.7}},
        {\"batches\":30,\"metrics\":{\"loss\":0.3,\"acc\":0.8}}]}" "$B/metrics" > /dev/null || exit 1
    curl -sf -H "$H" -X POST -d "{\"uuid\":\"$CK\",\"batches\":$len,\"storage_path\":\"$SP\",\"size\":$SIZE,\"metadata\":{\"format\":\"test\"}}" \
        "$B/checkpoints" > /dev/null || exit 1
    curl -sf -H "$H" -X POST -d "{\"kind\":\"validation\",\"key\":\"v-$len\",\"rows\":[{\"batches\":$len,\"metrics\":{\"loss\":0.25}}]}" \
        "$B/metrics" > /dev/null || exit 1
    done=$len
    echo "trained to $len"
done
W
experiment() { # NAME EXTRA-SPEC-LINES
    printf 'apiVersion: kdet.io/v1alpha1\nkind: Experiment\nmetadata:\n  name: %s\nspec:\n  name: %s\n%s\n' "$1" "$1" "$2" |
        timeout 30 kubectl apply -f - > "$tmp/out" 2>&1
}
spec="  entrypoint: sh $tmp/worker.sh
  environment:
    environment_variables: [CK=c0ffee00-0000-4000-8000-000000000001, SP=$tmp/ckpt/c0ffee00-0000-4000-8000-000000000001, SIZE=$size]
  hyperparameters:
    lr: 0.1
  searcher: {name: single, metric: loss, max_length: {batches: 30}}
  checkpoint_storage: {type: shared_fs, host_path: $tmp/ckpt}
  resources: {slots_per_trial: 1}"
# an experiment of two trials first, so that the store ids of experiments and trials differ below
experiment pre "  entrypoint: sleep 60
  hyperparameters: {lr: {type: double, minval: 0.1, maxval: 0.2}}
  searcher: {name: random, metric: loss, max_trials: 2, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}" || bad "create experiment pre" "$tmp/out"
for _ in $(seq 150); do
    kcurl -s -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/default/experiments/pre/trials" > "$tmp/p.json"
    [ "$(json "$tmp/p.json" "len([t for t in j['trials'] if 'id' in t])")" = 2 ] && break
    sleep 0.2
done
[ "$(json "$tmp/p.json" "len([t for t in j['trials'] if 'id' in t])")" = 2 ] && ok "API: started trials carry their store ids" ||
    bad "ids of pre's trials" "$tmp/p.json"
# det trial kill: one trial ends CANCELED through the controller, the other goes on
pre1=$(json "$tmp/p.json" "[t['id'] for t in j['trials'] if t['name'] == 'pre-1'][0]")
for _ in $(seq 150); do [ "$(kubectl get trial pre-1 -o 'jsonpath={.status.state}')" = ACTIVE ] && break; sleep 0.2; done
"$det" trial kill "$pre1" > "$tmp/out" 2>&1 && grep -q "trial pre-1 killed: kdet-controller ends it CANCELED" "$tmp/out" &&
    ok "det trial kill ID (an integer): the controller is told" || bad "det trial kill" "$tmp/out"
for _ in $(seq 150); do [ "$(kubectl get trial pre-1 -o 'jsonpath={.status.state}')" = CANCELED ] && break; sleep 0.2; done
kubectl get trial pre-1 pre-2 -o json > "$tmp/k.json" 2>> "$tmp/out"
[ "$(json "$tmp/k.json" "[(t['status']['state'], [c['reason'] for c in t['status'].get('conditions', []) if c['type'] == 'EarlyExit']) for t in j['items']]")" = \
    "[('CANCELED', ['UserCanceled']), ('ACTIVE', [])]" ] && ok "the killed trial ends CANCELED (EarlyExit UserCanceled); the other one still runs" ||
    bad "states after det trial kill" "$tmp/k.json"
kubectl get pods -l kdet.io/trial=pre-1 -o name > "$tmp/out" 2>&1 && [ ! -s "$tmp/out" ] && ok "the killed trial has no pods left" ||
    bad "pods of the killed trial" "$tmp/out"
"$det" trial kill pre-1 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "trial pre-1 has already ended (CANCELED): nothing to kill" "$tmp/out" &&
    ok "killing an ended trial: exit 1 saying so" || bad "kill an ended trial (exit $rc)" "$tmp/out"
code=$(kcurl -s -o "$tmp/t.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/default/trials/pre-1/kill")
[ "$code" = 409 ] && grep -q "has already ended (CANCELED)" "$tmp/t.json" && ok "API: POST trials/{t}/kill of an ended trial is 409" ||
    bad "API kill of an ended trial (HTTP $code)" "$tmp/t.json"
(unset KDET_API_URL KDET_API_TOKEN_FILE; KDET_DATA_DIR=$tmp/none "$det" trial kill pre-2) > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "det trial kill needs the controller API" "$tmp/out" && ok "det trial kill without the controller API: exit 4" ||
    bad "trial kill without the API (exit $rc)" "$tmp/out"
"$det" e kill pre > "$tmp/out" 2>&1 || bad "kill experiment pre" "$tmp/out"
experiment apiexp "$spec" || bad "create experiment apiexp" "$tmp/out"
timeout 100 "$det" experiment wait apiexp --timeout 90 > "$tmp/out" 2>&1 && ok "experiment apiexp COMPLETED" ||
    { bad "experiment apiexp did not complete" "$tmp/out"; tail -20 "$dd/logs/kdet-controller.log"; }

# ---- det trial metrics: what the worker reported, through the API
"$det" trial metrics apiexp-1 -o json > "$tmp/m.json" 2> "$tmp/out"
[ "$(json "$tmp/m.json" "[(r['step'], r['metrics']['loss'], r['metrics']['acc']) for r in j['metrics']]")" = \
    "[(10, 0.5, 0.61), (20, 0.4, 0.7), (30, 0.3, 0.8)]" ] && ok "trial metrics -o json: the training rows as reported" ||
    bad "trial metrics -o json" "$tmp/m.json"
"$det" trial metrics apiexp-1 > "$tmp/m.txt" 2> "$tmp/out"
grep -qE "^BATCHES +REPORTED +acc +loss$" "$tmp/m.txt" && grep -qE "^30 +[0-9-]+ [0-9:]+ +0.8 +0.3$" "$tmp/m.txt" &&
    [ "$(wc -l < "$tmp/m.txt")" = 4 ] && ok "trial metrics: a table with a column per metric" || bad "trial metrics table" "$tmp/m.txt"
"$det" trial metrics apiexp- -o json > "$tmp/m.json" 2> "$tmp/out" && [ "$(json "$tmp/m.json" "(j['trial'], len(j['metrics']))")" = "('apiexp-1', 3)" ] &&
    ok "trial metrics: a unique prefix of the trial's name" || bad "trial metrics by prefix" "$tmp/out"
"$det" trial metrics apiexp-1 --kind validation -o yaml > "$tmp/m.yaml" 2> "$tmp/out"
grep -q "loss: 0.25" "$tmp/m.yaml" && grep -q "step: 30" "$tmp/m.yaml" && grep -q "kind: validation" "$tmp/m.yaml" &&
    ok "trial metrics --kind validation -o yaml" || bad "validation metrics" "$tmp/m.yaml"
"$det" trial metrics apiexp-1 --downsample 2 -o json > "$tmp/m.json" 2> "$tmp/out"
[ "$(json "$tmp/m.json" "[r['step'] for r in j['metrics']]")" = "[10, 30]" ] &&
    ok "--downsample 2 keeps the first and the last row" || bad "--downsample 2" "$tmp/m.json"
"$det" trial metrics apiexp-1 --metric acc -o json > "$tmp/m.json" 2> "$tmp/out"
[ "$(json "$tmp/m.json" "[sorted(r['metrics']) for r in j['metrics']]")" = "[['acc'], ['acc'], ['acc']]" ] &&
    ok "--metric acc keeps only that metric" || bad "--metric acc" "$tmp/m.json"
"$det" trial metrics apiexp-1 --kind bogus > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "\-\-kind bogus: expected training, validation or profiling" "$tmp/out" &&
    ok "--kind bogus: usage error naming it" || bad "--kind bogus" "$tmp/out"
"$det" trial metrics apiexp-99 > "$tmp/out" 2>&1
[ $? -eq 5 ] && ok "metrics of an unknown trial: exit 5" || bad "unknown trial" "$tmp/out"
KDET_API_TOKEN=wrong-token "$det" trial metrics apiexp-1 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "refused the user token (401 Unauthorized" "$tmp/out" && ! grep -q "wrong-token" "$tmp/out" &&
    ok "wrong token: exit 4, a clear 401 message without the token" || bad "wrong token (exit $rc)" "$tmp/out"
(unset KDET_API_URL KDET_API_TOKEN_FILE; KDET_DATA_DIR=$dd "$det" trial metrics apiexp-1 -o json > "$tmp/m.json" 2> "$tmp/out") &&
    [ "$(json "$tmp/m.json" "len(j['metrics'])")" = 3 ] && ok "det finds the local deployment's API by itself (KDET_DATA_DIR)" ||
    bad "API from the data dir" "$tmp/out"

# ---- integer ids: the store's ids, through the controller API
code=$(kcurl -s -o "$tmp/e.json" -w '%{http_code}' -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/default/experiments/apiexp")
eid=$(json "$tmp/e.json" "j['experiment']['id']")
tid=$(json "$tmp/e.json" "[t['id'] for t in j['trials'] if t['name'] == 'apiexp-1'][0]")
[ "$code" = 200 ] && [ "$eid" -gt 0 ] 2>/dev/null && [ "$tid" -gt 0 ] 2>/dev/null &&
    ok "API: GET experiments/apiexp carries the store ids of the experiment ($eid) and its trial ($tid)" ||
    bad "API ids (HTTP $code)" "$tmp/e.json"
kcurl -s -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/default/experiments/$eid" > "$tmp/e.json"
kcurl -s -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/default/trials/$tid" > "$tmp/t.json"
[ "$(json "$tmp/e.json" "j['experiment']['name']")" = apiexp ] && [ "$(json "$tmp/t.json" "(j['trial']['name'], j['trial']['id'])")" = "('apiexp-1', $tid)" ] &&
    ok "API: an all-digit name that no object has is looked up as a store id" || bad "API lookup by id" "$tmp/t.json"
code=$(kcurl -s -o "$tmp/t.json" -w '%{http_code}' -H "Authorization: Bearer $token" "$KDET_API_URL/api/v1/namespaces/kube-public/trials/$tid")
[ "$code" = 404 ] && grep -q "no trial of namespace kube-public is named $tid or has the id $tid" "$tmp/t.json" &&
    ok "API: an id of another namespace is 404" || bad "API id in another namespace (HTTP $code)" "$tmp/t.json"
"$det" experiment list > "$tmp/l.txt" 2> "$tmp/out"
grep -qE "^ID +NAME +CONFIG NAME +STATE +PROGRESS +TRIALS +BEST +STARTED +DURATION$" "$tmp/l.txt" &&
    grep -qE "^$eid +apiexp +apiexp +COMPLETED +100% +1 " "$tmp/l.txt" && ! grep -q "note:" "$tmp/out" &&
    ok "experiment list: the integer id first" || bad "experiment list ids" "$tmp/l.txt"
"$det" e describe "$eid" > "$tmp/d.txt" 2> "$tmp/out"
grep -qE "^ID: +$eid$" "$tmp/d.txt" && grep -qE "^Resource: +apiexp$" "$tmp/d.txt" &&
    grep -qE "^$tid +apiexp-1 +COMPLETED " "$tmp/d.txt" && ok "det e describe ID (an integer) with its trials' ids" ||
    bad "describe by integer id" "$tmp/d.txt"
"$det" trial list "$eid" > "$tmp/l.txt" 2> "$tmp/out"
grep -qE "^ID +NAME +STATE +PROGRESS +BATCHES +BEST +RESTARTS +HPARAMS$" "$tmp/l.txt" && grep -qE "^$tid +apiexp-1 +COMPLETED " "$tmp/l.txt" &&
    ok "trial list EXPERIMENT-ID: the trials' integer ids" || bad "trial list ids" "$tmp/l.txt"
"$det" trial describe "$tid" > "$tmp/d.txt" 2> "$tmp/out"
grep -qE "^ID: +$tid$" "$tmp/d.txt" && grep -qE "^Name: +apiexp-1$" "$tmp/d.txt" && ok "det trial describe ID (an integer)" ||
    bad "trial describe by integer id" "$tmp/d.txt"
# a trial id that is no experiment's id: trial ids are not mixed up with experiment ids
ptid=$(json "$tmp/p.json" "[t['id'] for t in j['trials'] if t['id'] != $eid][0]")
ptname=$(json "$tmp/p.json" "[t['name'] for t in j['trials'] if t['id'] == $ptid][0]")
"$det" trial describe "$ptid" > "$tmp/d.txt" 2> "$tmp/out"
[ -n "$ptname" ] && grep -qE "^ID: +$ptid$" "$tmp/d.txt" && grep -qE "^Name: +$ptname$" "$tmp/d.txt" &&
    ok "det trial describe $ptid: trial ids are trials' ($ptname), not experiments'" || bad "trial describe $ptid" "$tmp/d.txt"
"$det" trial metrics "$tid" -o json > "$tmp/m.json" 2> "$tmp/out" && [ "$(json "$tmp/m.json" "(j['trial'], len(j['metrics']))")" = "('apiexp-1', 3)" ] &&
    ok "det trial metrics ID (an integer)" || bad "trial metrics by integer id" "$tmp/out"
"$det" trial logs "$tid" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -qx "\[rank=0\] trained to 30" "$tmp/out" &&
    ok "det trial logs ID (an integer) of an ended trial: its lines from the controller's store" || bad "trial logs by id (exit $rc)" "$tmp/out"
"$det" experiment logs "$eid" --tail 5 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -qx "\[apiexp-1\] \[rank=0\] trained to 30" "$tmp/out" &&
    ok "det experiment logs ID (an integer): each line with its trial" || bad "experiment logs by id (exit $rc)" "$tmp/out"
"$det" e archive "$eid" > "$tmp/out" 2>&1 && [ "$(kubectl get exp apiexp -o 'jsonpath={.spec.archived}')" = true ] &&
    "$det" e unarchive "$eid" >> "$tmp/out" 2>&1 && [ "$(kubectl get exp apiexp -o 'jsonpath={.spec.archived}')" = false ] &&
    ok "det e archive/unarchive ID (an integer) patch that experiment" || bad "archive by integer id" "$tmp/out"
"$det" e describe 999999 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 5 ] && grep -q 'no experiment in namespace "default" is named "999999" or has the id 999999' "$tmp/out" &&
    ok "an unknown integer id: exit 5 naming it" || bad "unknown integer id (exit $rc)" "$tmp/out"
(unset KDET_API_URL KDET_API_TOKEN_FILE; KDET_DATA_DIR=$tmp/none "$det" trial describe "$tid") > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "no trial is named \"$tid\" in namespace \"default\", and looking up integer ids needs the controller API: run det deploy local up" "$tmp/out" &&
    ok "an integer id without the controller API: exit 4 saying so" || bad "integer id without the API (exit $rc)" "$tmp/out"
(unset KDET_API_URL KDET_API_TOKEN_FILE; KDET_DATA_DIR=$tmp/none "$det" experiment list) > "$tmp/l.txt" 2> "$tmp/out"
grep -qE "^- +apiexp +apiexp +COMPLETED" "$tmp/l.txt" && grep -q "note: no integer ids (ID shows -): looking up integer ids needs the controller API" "$tmp/out" &&
    ok "experiment list without the controller API: ID -, and a note why" || bad "list without the API" "$tmp/out"
# a name wins over an id: an experiment named like apiexp's id
experiment "'$eid'" "  paused: true
  entrypoint: sleep 1
  hyperparameters: {lr: 0.1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}" || bad "create experiment $eid" "$tmp/out"
"$det" e describe "$eid" > "$tmp/d.txt" 2> "$tmp/out"
grep -qE "^Resource: +$eid$" "$tmp/d.txt" && ok "an experiment named $eid is found by that name before the id" ||
    bad "name before id" "$tmp/d.txt"
timeout 30 kubectl delete exp "$eid" > "$tmp/out" 2>&1 || bad "delete experiment $eid" "$tmp/out"

# ---- users and namespaces (docs/security.md)
"$det" user whoami > "$tmp/w.txt" 2> "$tmp/out" && grep -qE "^user: +admin$" "$tmp/w.txt" &&
    grep -qE "^admin: +yes$" "$tmp/w.txt" && ok "det user whoami: the local deployment's token is the bootstrap administrator" ||
    bad "whoami admin" "$tmp/out"
"$det" user create alice --namespaces default --token-file "$tmp/alice.tok" > "$tmp/out" 2>&1 &&
    [ "$(stat -c %a "$tmp/alice.tok")" = 600 ] && grep -q "^kdet_[0-9]*_" "$tmp/alice.tok" &&
    grep -q "created user alice (admin: no, namespaces: default)" "$tmp/out" &&
    ok "det user create --token-file: the token in a 0600 file" || bad "user create alice" "$tmp/out"
"$det" user create bob --namespaces team-b > "$tmp/bob.tok" 2> "$tmp/out" && [ "$(grep -c . "$tmp/bob.tok")" = 1 ] &&
    ok "det user create: the token alone on stdout" || bad "user create bob" "$tmp/out"
"$det" user create bob > "$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "user bob already exists" "$tmp/out" && ok "a second bob: exit 1 saying so" || bad "duplicate user" "$tmp/out"
KDET_API_TOKEN=$(cat "$tmp/bob.tok") "$det" trial metrics apiexp-1 > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "403 Forbidden): user bob may not use namespace default" "$tmp/out" &&
    ok "bob (namespace team-b) is refused apiexp-1's metrics: exit 4, 403" || bad "bob reads default (exit $rc)" "$tmp/out"
KDET_API_TOKEN=$(cat "$tmp/bob.tok") "$det" job list -o json > "$tmp/j.json" 2> "$tmp/out"
[ "$(json "$tmp/j.json" "len(j['jobs'])")" = 0 ] && ok "bob's job list has none of namespace default's jobs" ||
    bad "bob's job list" "$tmp/j.json"
(unset KDET_API_TOKEN_FILE; "$det" user login --token-file "$tmp/alice.tok") > "$tmp/out" 2>&1 &&
    [ "$(stat -c %a "$KDET_LOGIN_FILE")" = 600 ] && grep -q "logged in" "$tmp/out" &&
    ok "det user login: the token checked and kept (0600)" || bad "login alice" "$tmp/out"
(unset KDET_API_TOKEN_FILE; "$det" user whoami; "$det" trial metrics apiexp-1 -o json > "$tmp/m.json") > "$tmp/w.txt" 2> "$tmp/out" &&
    grep -qE "^user: +alice$" "$tmp/w.txt" && [ "$(json "$tmp/m.json" "len(j['metrics'])")" = 3 ] &&
    ok "after login det is alice, who reads namespace default" || bad "alice after login" "$tmp/out"
(unset KDET_API_TOKEN_FILE; "$det" user list) > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "is for administrators; user alice is not one" "$tmp/out" && ok "det user list as alice: 403" ||
    bad "alice lists users (exit $rc)" "$tmp/out"
"$det" user list > "$tmp/u.txt" 2> "$tmp/out" && grep -qE "^NAME +ADMIN +NAMESPACES +TOKENS +CREATED$" "$tmp/u.txt" &&
    grep -qE "^alice +no +default +1 " "$tmp/u.txt" && grep -qE "^bob +no +team-b +1 " "$tmp/u.txt" &&
    ok "det user list (administrator)" || bad "user list" "$tmp/u.txt"
"$det" user update bob --namespaces team-b,default > "$tmp/out" 2>&1 &&
    KDET_API_TOKEN=$(cat "$tmp/bob.tok") "$det" trial metrics apiexp-1 -o json > "$tmp/m.json" 2>> "$tmp/out" &&
    ok "det user update --namespaces opens namespace default to bob" || bad "user update bob" "$tmp/out"
aid=$("$det" token list --user alice -o json 2> "$tmp/out" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$det" token revoke "$aid" > "$tmp/out" 2>&1 && grep -q "token $aid of user alice revoked" "$tmp/out" &&
    ok "det token revoke (administrator)" || bad "token revoke" "$tmp/out"
(unset KDET_API_TOKEN_FILE; "$det" user whoami) > "$tmp/out" 2>&1
[ $? -eq 4 ] && grep -q "401 Unauthorized" "$tmp/out" && ok "a revoked token: 401, exit 4" || bad "revoked token" "$tmp/out"
"$det" user logout > "$tmp/out" 2>&1 && [ ! -e "$KDET_LOGIN_FILE" ] && ok "det user logout forgets the token" ||
    bad "logout" "$tmp/out"
KDET_API_TOKEN=$(cat "$tmp/bob.tok") "$det" token create --description ci > "$tmp/bob2.tok" 2> "$tmp/out" &&
    KDET_API_TOKEN=$(cat "$tmp/bob2.tok") "$det" user whoami > "$tmp/w.txt" 2>> "$tmp/out" && grep -qE "^user: +bob$" "$tmp/w.txt" &&
    ok "det token create: bob's new token works" || bad "bob token create" "$tmp/out"
KDET_API_TOKEN=$(cat "$tmp/bob.tok") "$det" token create --user alice > "$tmp/out" 2>&1
[ $? -eq 4 ] && grep -q "only an administrator may make tokens for another user" "$tmp/out" &&
    ok "bob cannot make alice a token" || bad "bob makes alice's token" "$tmp/out"
(KDET_API_CA_FILE=/etc/hostname "$det" user whoami) > "$tmp/out" 2>&1
[ $? -eq 4 ] && grep -q "certificate det does not trust" "$tmp/out" && ok "a CA that did not sign the controller's certificate: refused" ||
    bad "wrong CA" "$tmp/out"

# ---- checkpoints
"$det" checkpoint list apie > "$tmp/c.txt" 2> "$tmp/out"
grep -qE "^UUID +TRIAL +BATCHES +STATE +SIZE +REPORTED +STORAGE PATH$" "$tmp/c.txt" &&
    grep -qE "^c0ffee00-0000-4000-8000-000000000001 +apiexp-1 +30 +ACTIVE .*$tmp/ckpt/c0ffee00-0000-4000-8000-000000000001$" "$tmp/c.txt" && ok "checkpoint list EXPERIMENT" ||
    bad "checkpoint list" "$tmp/c.txt"
"$det" checkpoint list --trial apiexp-1 -o json > "$tmp/c.json" 2> "$tmp/out"
[ "$(json "$tmp/c.json" "[(c['uuid'], c['trial'], c['steps_completed'], c['size_bytes']) for c in j['checkpoints']]")" = "[('c0ffee00-0000-4000-8000-000000000001', 'apiexp-1', 30, $size)]" ] &&
    ok "checkpoint list --trial -o json" || bad "checkpoint list --trial" "$tmp/c.json"
"$det" checkpoint describe c0ffee00 > "$tmp/c.txt" 2> "$tmp/out"
grep -qE "^UUID: +c0ffee00-0000-4000-8000-000000000001$" "$tmp/c.txt" && grep -qE "^Experiment: +apiexp$" "$tmp/c.txt" &&
    grep -qE "^Trial: +apiexp-1 \(id [0-9]+\)$" "$tmp/c.txt" &&
    grep -qE "^Batches: +30$" "$tmp/c.txt" && grep -q '"format":"test"' "$tmp/c.txt" &&
    ok "checkpoint describe (a unique uuid prefix)" || bad "checkpoint describe" "$tmp/c.txt"
"$det" checkpoint download c0ffee00-0000-4000-8000-000000000001 -o "$tmp/dl" > "$tmp/out" 2>&1 && diff -r "$tmp/model" "$tmp/dl" >> "$tmp/out" 2>&1 &&
    ok "checkpoint download: the same bytes" || bad "checkpoint download" "$tmp/out"
"$det" checkpoint describe nope > "$tmp/out" 2>&1
[ $? -eq 5 ] && grep -q 'checkpoint "nope" is not registered' "$tmp/out" && ok "unknown checkpoint: exit 5" ||
    bad "unknown checkpoint" "$tmp/out"

# ---- a checkpoint on S3 (s3rver): download reads the bucket the experiment names
S3RVER=$PWD/.deps/s3rver/node_modules/.bin/s3rver
if [ -x "$S3RVER" ]; then
    s3port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/s3"
    NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" -d "$tmp/s3" -a 127.0.0.1 -p "$s3port" --silent \
        --configure-bucket ckpts > "$tmp/s3rver.log" 2>&1 &
    s3pid=$!
    for _ in $(seq 100); do (exec 3<> "/dev/tcp/127.0.0.1/$s3port") 2> /dev/null && break; sleep 0.1; done
    export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
    "$build/bin/dtrain" ckpt --storage s3://ckpts/p --endpoint-url "http://127.0.0.1:$s3port" --quiet \
        upload "$tmp/model" --uuid c0ffee00-0000-4000-8000-0000000000e3 > "$tmp/out" 2>&1 || bad "dtrain ckpt upload to s3rver" "$tmp/out"
    experiment s3exp "${spec//CK=c0ffee00-0000-4000-8000-000000000001, SP=$tmp\/ckpt\/c0ffee00-0000-4000-8000-000000000001/CK=c0ffee00-0000-4000-8000-0000000000e3, SP=s3://ckpts/p/c0ffee00-0000-4000-8000-0000000000e3}
" && kubectl patch exp s3exp --type merge -p "{\"spec\":{\"checkpoint_storage\":{\"type\":\"s3\",\"host_path\":null,
        \"bucket\":\"ckpts\",\"prefix\":\"p\",\"endpoint_url\":\"http://127.0.0.1:$s3port\"}}}" > "$tmp/out" 2>&1 ||
        bad "create experiment s3exp" "$tmp/out"
    timeout 100 "$det" experiment wait s3exp --timeout 90 > "$tmp/out" 2>&1 || bad "experiment s3exp" "$tmp/out"
    "$det" checkpoint download c0ffee00-0000-4000-8000-0000000000e3 -o "$tmp/dl-s3" > "$tmp/out" 2>&1 && diff -r "$tmp/model" "$tmp/dl-s3" >> "$tmp/out" 2>&1 &&
        ok "checkpoint download from S3: the same bytes" || bad "checkpoint download from S3" "$tmp/out"
    (unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; HOME=$tmp AWS_SHARED_CREDENTIALS_FILE=$tmp/none \
        "$det" checkpoint download c0ffee00-0000-4000-8000-0000000000e3 -o "$tmp/dl-s3b") > "$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "checkpoint c0ffee00-0000-4000-8000-0000000000e3 (storage path s3://ckpts/p/c0ffee00-0000-4000-8000-0000000000e3): opening the checkpoint storage: .*credentials" "$tmp/out" &&
        ok "S3 without credentials: exit 1, a clear error" ||
        bad "S3 without credentials (exit $rc)" "$tmp/out"
    unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
    kill "$s3pid" 2> /dev/null
    wait "$s3pid" 2> /dev/null
else
    echo "note: s3rver is not installed (make deps): the S3 download is not checked"
fi

# ---- GC policy: a patch of spec.checkpoint_storage
"$det" experiment set gc-policy apiexp --save-trial-best 3 --save-trial-latest 2 > "$tmp/out" 2>&1 &&
    timeout 30 kubectl get exp apiexp -o json > "$tmp/e.json" 2>> "$tmp/out" &&
    [ "$(json "$tmp/e.json" "'%s/%s/%s' % tuple(j['spec']['checkpoint_storage'][k] for k in ('save_trial_best', 'save_trial_latest', 'type'))")" = 3/2/shared_fs ] &&
    ok "experiment set gc-policy: visible in the spec" || bad "gc-policy" "$tmp/out"
"$det" experiment set gc-policy apiexp > "$tmp/out" 2>&1
[ $? -eq 2 ] && ok "gc-policy without a value: usage error" || bad "gc-policy without values" "$tmp/out"

# ---- the job queue
paused="  paused: true
  entrypoint: sleep 1
  hyperparameters: {lr: 0.1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}"
experiment jq-a "$paused" && experiment jq-b "$paused" || bad "create jq-a, jq-b" "$tmp/out"
order() { "$det" job list -o json > "$tmp/j.json" 2> "$tmp/out"; json "$tmp/j.json" "' '.join(x['experiment'] for x in j['jobs'])"; }
[ "$(order)" = "jq-a jq-b" ] && ok "job list: submission order (the completed experiment is not a job)" || bad "job list order $(order)" "$tmp/j.json"
"$det" job update jq-b --ahead-of jq-a > "$tmp/out" 2>&1 &&
    [ "$(kubectl get exp jq-b -o 'jsonpath={.metadata.annotations.kdet\.io/ahead-of}')" = jq-a ] &&
    ok "job update --ahead-of: the annotation kdet.io/ahead-of" || bad "ahead-of" "$tmp/out"
[ "$(order)" = "jq-b jq-a" ] && ok "job list: jq-b ahead of jq-a" || bad "order after ahead-of: $(order)" "$tmp/j.json"
"$det" job update jq-a --priority 10 > "$tmp/out" 2>&1 &&
    [ "$(kubectl get exp jq-a -o 'jsonpath={.spec.resources.priority}')" = 10 ] &&
    ok "job update --priority: spec.resources.priority" || bad "priority" "$tmp/out"
[ "$(order)" = "jq-a jq-b" ] && ok "job list: priority 10 first" || bad "order after priority: $(order)" "$tmp/j.json"
"$det" job list > "$tmp/j.txt" 2> "$tmp/out"
grep -qE "^POSITION +ID +NAME +STATE +PRIORITY +TRIALS +SLOTS +POOL$" "$tmp/j.txt" && grep -qE "^1 +jq-a +jq-a +[A-Z_]+ +10 " "$tmp/j.txt" &&
    ok "job list: table" || bad "job list table" "$tmp/j.txt"
printf '# move b first\njq-b --priority 5\n\njq-a --priority 500\njq-a --resource-pool gpu-pool\n' |
    "$det" job update-batch > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "stdin:4: --priority 500: expected a number from 1" "$tmp/out" && grep -q "2 job updates applied, 1 failed" "$tmp/out" &&
    ok "update-batch: a bad line named, the others applied" || bad "update-batch (exit $rc)" "$tmp/out"
[ "$(order)" = "jq-b jq-a" ] && [ "$(kubectl get exp jq-a -o 'jsonpath={.spec.resources.resource_pool}')" = gpu-pool ] &&
    ok "update-batch: priority and resource pool changed" || bad "after update-batch: $(order)" "$tmp/j.json"
"$det" job update jq-a > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "nothing to change" "$tmp/out" && ok "job update without a change: usage error" || bad "update without change" "$tmp/out"

# Slots as the controller counts them (its settings from GET /api/v1/info): 2 fake GPUs.
"$det" agent list > "$tmp/agents.txt" 2> "$tmp/out"
grep -qE "^[a-z0-9.-]+ +default +gpu +2 +[0-2] +2 " "$tmp/agents.txt" &&
    grep -qF "(kdet-controller counts with --slot-type auto, --cpu-per-slot 1)" "$tmp/agents.txt" &&
    ok "agent list: the node's pool, gpu slots, the controller's settings" || bad "agent list" "$tmp/agents.txt"
"$det" slot list -o json > "$tmp/slots.json" 2> "$tmp/out"
[ "$(json "$tmp/slots.json" "' '.join(s['type'] for s in j['slots']) + ' ' + str(j['settings']['assumed'])")" = "gpu gpu False" ] &&
    ok "slot list: two gpu slots, settings from the controller" || bad "slot list" "$tmp/slots.json"

grep -rqF -- "$token" "$tmp"/*.txt "$tmp"/*.json "$tmp/out" "$dd/logs" 2>/dev/null && bad "the user token appears in output or logs" ||
    ok "the user token is in no output and no log"
grep -rqF -e "$(cat "$tmp/alice.tok")" -e "$(cat "$tmp/bob.tok")" "$dd/logs" 2>/dev/null && bad "a user's token appears in the logs" ||
    ok "users' tokens are in no log"
timeout 60 "$det" deploy local down --data-dir "$dd" > "$tmp/out" 2>&1 && ok "deploy local down" || bad "down" "$tmp/out"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
