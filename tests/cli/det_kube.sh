#!/bin/bash
# det's verbs against a real API server (kdet-local on a free port): errors
# for no CRDs / 404 / unreachable, create without --dry-run, list, describe,
# the spec patches read back with kubectl, wait on a status patched through
# the status subresource, templates, trial logs of a pod run by the process
# kubelet, and delete.
set -u
build=${KD_BUILD:-$PWD/build}
cd "${KD_SRC:-.}"
det=$build/bin/det
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | head -40; fail=$((fail + 1)); }
# check NAME WANT_RC PATTERN -- command...: runs it (stdout+stderr to $tmp/out), checks both
check() {
    local name=$1 want=$2 pat=$3; shift 4
    "$@" > "$tmp/out" 2>&1
    local rc=$?
    if [ "$rc" -eq "$want" ] && { [ -z "$pat" ] || grep -qE -- "$pat" "$tmp/out"; }; then ok "$name"
    else echo "     (exit $rc, want $want; pattern: $pat)"; bad "$name" "$tmp/out"; fi
}

if ! command -v kubectl >/dev/null; then
    echo "skip: kubectl is not installed"; echo "1 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d /tmp/kd-det-kube-XXXXXX)
pid="" bgpid=""
cleanup() {
    [ -n "$bgpid" ] && kill "$bgpid" 2>/dev/null && wait "$bgpid" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "starting kdet-local..."
"$build/bin/kdet-local" --port 0 --port-file "$tmp/port" --kubeconfig-out "$tmp/kubeconfig" \
    --data-dir "$tmp/data" --log-level warn > "$tmp/kdet-local.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && [ -s "$tmp/kubeconfig" ] && break; sleep 0.1; done
if [ ! -s "$tmp/kubeconfig" ]; then
    bad "kdet-local did not start" "$tmp/kdet-local.log"; echo "$pass passed, $fail failed"; exit 1
fi
port=$(cat "$tmp/port")
export KUBECONFIG=$tmp/kubeconfig
# no controller API here (det_api.sh has one): not even a local deployment of the user's
unset KDET_API_URL KDET_API_TOKEN KDET_API_TOKEN_FILE
export KDET_DATA_DIR=$tmp/no-deployment
k() { timeout 30 kubectl --request-timeout=20s "$@"; }

# ---- errors before anything is installed
check "no CRDs: exit 4 and how to install them" 4 \
    "does not serve experiments.kdet.io: the kdet CRDs are not installed. Install them with: kubectl apply -f crds/" \
    -- "$det" experiment list
sed "s/127.0.0.1:$port/127.0.0.1:1/" "$tmp/kubeconfig" > "$tmp/kc-down"
check "unreachable: exit 4 naming the server" 4 "cannot reach the Kubernetes API server at https://127.0.0.1:1 " \
    -- "$det" experiment describe x --kubeconfig "$tmp/kc-down"
check "no kubeconfig: exit 4 naming the file" 4 "kubeconfig: $tmp/none: No such file or directory" \
    -- env KUBECONFIG="$tmp/none" "$det" trial list x
check "missing context: exit 4" 4 "context" -- "$det" experiment list --context nope

k apply -f crds/ > "$tmp/out" 2>&1 || bad "kubectl apply -f crds/" "$tmp/out"
for _ in $(seq 50); do k get exp > /dev/null 2>&1 && break; sleep 0.1; done

# ---- create without --dry-run
ex=examples/fashion-mnist-c
check "create submits the experiment" 0 "created experiment fashion-mnist-c-const-[0-9a-f]{8} in namespace \"default\"" \
    -- "$det" experiment create $ex/const.yaml $ex
name=$(grep -oE '^fashion-mnist-c-const-[0-9a-f]{8}$' "$tmp/out" | head -1)
[ -n "$name" ] && ok "create prints the name on stdout ($name)" || bad "create prints the name" "$tmp/out"
if [ "$(k get exp "$name" -o jsonpath='{.spec.searcher.name}/{.spec.context.configMap}')" = "single/$name-context" ] &&
    [ "$(k get cm "$name-context" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')" = "Experiment/$name" ]; then
    ok "the Experiment and its context ConfigMap (owned by it) are stored"
else bad "read back the created resources"; fi
check "creating it again makes a new experiment with a new name" 0 "created experiment $name-2 in namespace \"default\"" \
    -- "$det" experiment create $ex/const.yaml $ex
if [ "$(k get exp "$name-2" -o jsonpath='{.spec.context.configMap}')" = "$name-2-context" ] &&
    [ "$(k get cm "$name-2-context" -o jsonpath='{.metadata.ownerReferences[0].name}')" = "$name-2" ] &&
    [ "$(k get cm "$name-context" -o jsonpath='{.metadata.ownerReferences[0].name}')" = "$name" ]; then
    ok "the second one has its own context ConfigMap; the first keeps its own"
else bad "read back the second experiment"; fi
check "a third time: -3" 0 "created experiment $name-3 " -- "$det" experiment create $ex/const.yaml $ex
check "--paused creates it paused" 0 "created experiment fashion-mnist-c-const-[0-9a-f]{8} " -- "$det" experiment create $ex/const.yaml $ex --paused
pname=$(grep -oE '^fashion-mnist-c-const-[0-9a-f]{8}$' "$tmp/out" | head -1)
[ -n "$pname" ] && [ "$(k get exp "$pname" -o jsonpath='{.spec.paused}')" = "true" ] && ok "spec.paused is true" || bad "spec.paused of --paused"
k delete exp "$name-2" "$name-3" "$pname" > "$tmp/out" 2>&1 || bad "delete the extra experiments" "$tmp/out"
check "create in a namespace that does not exist" 5 "not found" -- "$det" experiment create $ex/const.yaml $ex -n nope

# ---- list and describe
check "list shows it, WAITING without a controller" 0 "^- +$name +fashion-mnist-c-const +WAITING" -- "$det" experiment list
check "list header" 0 "^ID +NAME +CONFIG NAME +STATE +PROGRESS +TRIALS +BEST +STARTED +DURATION" -- "$det" experiment list
check "describe by prefix says nothing acted on it" 0 "WAITING for kdet-controller: nothing has acted on this experiment" \
    -- "$det" experiment describe fashion-mnist-c-const
check "list without the controller API: a note that ID needs it" 0 "note: no integer ids \(ID shows -\): looking up integer ids needs the controller API" \
    -- "$det" experiment list
check "an integer ID without the controller API: exit 4 saying so" 4 \
    "no experiment is named \"12\" in namespace \"default\", and looking up integer ids needs the controller API" \
    -- "$det" experiment describe 12
check "describe -o json" 0 "\"name\": \"$name\"" -- "$det" experiment describe "$name" -o json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["experiment"]["metadata"]["name"]==sys.argv[2]; assert d["trials"]==[]' \
    "$tmp/out" "$name" && ok "describe -o json parses" || bad "describe -o json parses" "$tmp/out"
check "list -o yaml" 0 "^kind: List" -- "$det" experiment list -o yaml
check "404 names the experiment and namespace" 5 "experiment \"nope\" not found in namespace \"default\"" \
    -- "$det" experiment describe nope
check "404 in another namespace" 5 "not found in namespace \"team-b\"" -- "$det" experiment pause "$name" -n team-b
check "a bad -o" 2 "-o xml: expected table, json or yaml" -- "$det" experiment list -o xml
"$det" experiment create $ex/adaptive.yaml $ex > /dev/null 2>&1
check "an ambiguous prefix lists the matches" 2 "ID \"fashion-mnist-c-\" is ambiguous" \
    -- "$det" experiment describe fashion-mnist-c-

# ---- workspace and project: det labels the Experiment, list filters by them
sed 's/^name: .*/name: scoped/' $ex/const.yaml > "$tmp/scoped.yaml"
printf 'workspace: Team A\nproject: Vision (2024)\n' >> "$tmp/scoped.yaml"
"$det" experiment create "$tmp/scoped.yaml" $ex > /dev/null 2>&1
scoped=$(k get exp -l kdet.io/workspace=team-a,kdet.io/project=vision-2024 -o jsonpath='{.items[*].metadata.name}')
case "$scoped" in scoped-*) ok "the Experiment carries kdet.io/workspace and kdet.io/project" ;;
    *) bad "workspace and project labels (got \"$scoped\")" ;; esac
check "list --workspace keeps that workspace" 0 "^- +scoped-" -- "$det" experiment list --workspace "team a"
grep -q "$name" "$tmp/out" && bad "list --workspace shows another workspace's" "$tmp/out" || ok "list --workspace leaves out the others"
check "list --workspace --project" 0 "^- +scoped-" -- "$det" experiment list --workspace Team-A --project "vision 2024"
check "list --project of none" 0 "no experiments in namespace \"default\" in that workspace or project" \
    -- "$det" experiment list --project other
check "list --workspace without a letter or digit" 2 "det: --workspace !!: no letter or digit" \
    -- "$det" experiment list --workspace '!!'
check "list without a filter shows both" 0 "^- +scoped-" -- "$det" experiment list
grep -q "$name" "$tmp/out" && ok "list without a filter shows the unscoped one too" || bad "list without a filter" "$tmp/out"

# ---- desired-state patches, read back through the API
spec() { k get exp "$name" -o jsonpath="{.spec.$1}"; }
check "pause" 0 "paused \(spec.paused=true\)" -- "$det" experiment pause "$name"
[ "$(spec paused)" = "true" ] && ok "pause sets spec.paused" || bad "spec.paused after pause"
check "activate" 0 "activated" -- "$det" experiment activate "${name:0:25}"
[ "$(spec paused)" = "false" ] && ok "activate clears spec.paused" || bad "spec.paused after activate"
check "archive" 0 "archived" -- "$det" experiment archive "$name"
[ "$(spec archived)" = "true" ] && ok "archive sets spec.archived" || bad "spec.archived"
check "list hides archived experiments" 0 "" -- "$det" experiment list
grep -q "$name" "$tmp/out" && bad "archived experiment listed" "$tmp/out" || ok "archived experiment not listed"
check "list --all shows them" 0 "^- +$name " -- "$det" experiment list --all
check "unarchive" 0 "unarchived" -- "$det" experiment unarchive "$name"
[ "$(spec archived)" = "false" ] && ok "unarchive clears spec.archived" || bad "spec.archived after unarchive"
check "cancel" 0 "canceled \(spec.canceled=true\)" -- "$det" experiment cancel "$name"
[ "$(spec canceled)" = "true" ] && ok "cancel sets spec.canceled" || bad "spec.canceled"
check "activating a canceled experiment is refused" 1 "is canceled; it cannot be activated" -- "$det" experiment activate "$name"
cat > "$tmp/long.yaml" <<EOF
apiVersion: kdet.io/v1alpha1
kind: Trial
metadata: {name: $name-1}
spec: {experiment: $name, requestId: r-000001, hparams: {}, seed: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: $name-1-0, labels: {kdet.io/trial: $name-1}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 60
  containers:
  - {name: main, image: none, command: [sleep, "300"]}
EOF
k apply -f "$tmp/long.yaml" > "$tmp/out" 2>&1 || bad "apply a long-running trial pod" "$tmp/out"
for _ in $(seq 100); do [ "$(k get pod "$name-1-0" -o jsonpath='{.status.phase}')" = Running ] && break; sleep 0.1; done
check "kill" 0 "deleted 1 trial pod with grace period 0" -- "$det" experiment kill "$name"
gone=0
for _ in $(seq 50); do k get pod "$name-1-0" > /dev/null 2>&1 || { gone=1; break; }; sleep 0.1; done
[ $gone = 1 ] && ok "kill deletes the trial's pods at once" || bad "the killed trial's pod is still there"
[ -n "$(k get exp "$name" -o jsonpath='{.metadata.annotations.kdet\.io/kill}')" ] && ok "kill annotates kdet.io/kill" ||
    bad "kdet.io/kill annotation"

# ---- wait on a status written through the status subresource
other=$(k get exp -o name | grep -v "$name" | head -1 | cut -d/ -f2)
st() { k patch exp "$1" --subresource=status --type=merge -p "$2" > /dev/null; }
(sleep 2; st "$other" '{"status":{"state":"ACTIVE","observedGeneration":1,"progress":0.25,"progressPercent":"25%","trials":{"total":4,"active":4}}}'
 sleep 2; st "$other" '{"status":{"state":"COMPLETED","observedGeneration":1,"progress":1,"progressPercent":"100%","trials":{"total":4,"completed":4},"bestValidation":{"trial":"t1","metric":"validation_loss","value":0.25,"batches":100}}}') &
bgpid=$!
check "wait exits 0 on COMPLETED" 0 "experiment $other COMPLETED" -- timeout 60 "$det" experiment wait "$other" --timeout 50s
grep -qF "ACTIVE [#####...............] 25%, trials 4 (4 active" "$tmp/out" && ok "wait shows the progress line" || bad "wait progress line" "$tmp/out"
wait $bgpid; bgpid=""
check "list shows state, progress, trials, best" 0 "^- +$other +fashion-mnist-c-adaptive +COMPLETED +100% +4 +0.25" -- "$det" experiment list
(sleep 1; st "$name" '{"status":{"state":"ERROR","observedGeneration":9,"message":"trial 3 failed 2 times"}}') &
bgpid=$!
check "wait exits 6 on ERROR with the reason" 6 "ended ERROR: trial 3 failed 2 times" -- timeout 60 "$det" experiment wait "$name"
wait $bgpid; bgpid=""
(for _ in $(seq 100); do n=$(k get exp -n kube-node-lease -o name 2>/dev/null | head -1 | cut -d/ -f2); [ -n "$n" ] && break; sleep 0.1; done
 sleep 1
 k patch exp "$n" -n kube-node-lease --subresource=status --type=merge \
     -p '{"status":{"state":"CANCELED","observedGeneration":1,"message":"canceled by a test"}}' > /dev/null) &
bgpid=$!
check "create --follow follows it to the end (exit 6 when CANCELED)" 6 "ended CANCELED: canceled by a test" \
    -- timeout 60 "$det" experiment create $ex/const.yaml $ex -n kube-node-lease --follow
grep -q "following it" "$tmp/out" && ok "create --follow says it follows" || bad "create --follow" "$tmp/out"
wait $bgpid; bgpid=""
check "wait on a terminal experiment returns at once" 0 "COMPLETED" -- timeout 10 "$det" experiment wait "$other"
"$det" experiment create $ex/const.yaml $ex -n kube-public > /dev/null 2>&1
check "wait --timeout exits 7" 7 "timed out after 1s" -- timeout 30 "$det" experiment wait fashion -n kube-public --timeout 1s
pub=$(k get exp -n kube-public -o name | head -1 | cut -d/ -f2)
k patch exp "$pub" -n kube-public --subresource=status --type=merge -p '{"status":{"state":"ACTIVE","observedGeneration":1}}' > /dev/null
"$det" experiment pause "$pub" -n kube-public > /dev/null 2>&1
check "describe says when the controller has not seen the latest change" 0 \
    "has not yet acted on the latest change: generation 2, observed 1" -- "$det" experiment describe "$pub" -n kube-public
(sleep 2; k delete exp "$pub" -n kube-public > /dev/null) &
bgpid=$!
check "wait exits 5 when the experiment is deleted meanwhile" 5 "was deleted while waiting" \
    -- timeout 60 "$det" experiment wait "$pub" -n kube-public
wait $bgpid; bgpid=""
check "a bad --timeout" 2 "--timeout soon: expected a duration" -- "$det" experiment wait "$name" --timeout soon

# ---- templates
printf 'resources: {slots_per_trial: 2}\nlabels: [from-template]\n' > "$tmp/t.yaml"
check "template set" 0 "template gpu created" -- "$det" template set gpu "$tmp/t.yaml"
check "template set again replaces it" 0 "template gpu updated" -- "$det" template set gpu "$tmp/t.yaml"
[ "$(k get cm -l kdet.io/template=gpu -o jsonpath='{.items[0].data.template\.yaml}')" = "$(cat "$tmp/t.yaml")" ] &&
    ok "the template is a ConfigMap labelled kdet.io/template with template.yaml" || bad "template ConfigMap"
check "template list" 0 "^gpu +resources,labels" -- "$det" template list
check "template describe" 0 "slots_per_trial: 2" -- "$det" template describe gpu
check "create --template NAME checks the merge with the stored template" 0 "merged over template gpu" \
    -- "$det" experiment create $ex/const.yaml $ex --template gpu --dry-run
grep -q "^  template: gpu$" "$tmp/out" && ! grep -q "from-template" "$tmp/out" &&
    ok "spec.template names it; kdet-controller merges it (once)" || bad "spec.template after --template NAME" "$tmp/out"
printf 'resources: {slots_per_trial: -2}\n' > "$tmp/t2.yaml"
"$det" template set neg "$tmp/t2.yaml" > /dev/null 2>&1
check "a stored template that makes the config invalid" 3 "slots_per_trial" \
    -- "$det" experiment create $ex/const.yaml $ex --template neg --dry-run
printf 'a: [1\n' > "$tmp/bad.yaml"
check "template set refuses bad YAML" 3 "bad.yaml:" -- "$det" template set broken "$tmp/bad.yaml"
check "template set refuses a bad name" 2 "template name \"Bad_Name\"" -- "$det" template set Bad_Name "$tmp/t.yaml"
check "template set in a namespace that does not exist" 5 "cannot create template gpu in namespace \"nope\".*does the namespace exist" \
    -- "$det" template set gpu "$tmp/t.yaml" -n nope
check "template rm" 0 "template gpu deleted" -- "$det" template rm gpu
check "template describe after rm" 5 "template \"gpu\" not found in namespace \"default\"" -- "$det" template describe gpu
check "create --template of a missing template" 5 "template \"nope\" not found" \
    -- "$det" experiment create $ex/const.yaml $ex --template nope --dry-run

# ---- trials and their logs (a pod run by kdet-local's kubelet)
cat > "$tmp/trial.yaml" <<EOF
apiVersion: kdet.io/v1alpha1
kind: Trial
metadata: {name: $other-1}
spec: {experiment: $other, requestId: r-000001, hparams: {lr: 0.01, layers: 2}, seed: 7}
---
apiVersion: v1
kind: Pod
metadata: {name: $other-1-0, labels: {kdet.io/trial: $other-1}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: none
    command: [sh, -c, 'for i in 1 2 3; do echo "[rank=0] step \$i"; sleep 0.3; done; echo done']
EOF
k apply -f "$tmp/trial.yaml" > "$tmp/out" 2>&1 || bad "apply a trial and its pod" "$tmp/out"
check "trial list EXP" 0 "^- +$other-1 +WAITING .*\{\"layers\":2,\"lr\":0.01\}" -- "$det" trial list "$other"
check "trial describe" 0 "Pods: +$other-1-0" -- "$det" trial describe "$other-1"
check "trial logs -f follows the pod to its end" 0 "step 3" -- timeout 60 "$det" trial logs "$other-1" -f
[ "$(grep -c 'step' "$tmp/out")" = 3 ] && grep -q '^done$' "$tmp/out" && ok "logs -f: every line once" || bad "logs -f lines" "$tmp/out"
check "trial logs (no follow)" 0 "^\[rank=0\] step 1$" -- "$det" trial logs "$other-1"
cat > "$tmp/trial2.yaml" <<EOF
apiVersion: kdet.io/v1alpha1
kind: Trial
metadata: {name: $other-2}
spec: {experiment: $other, requestId: r-000002, hparams: {lr: 0.1}, seed: 8}
---
apiVersion: v1
kind: Pod
metadata: {name: $other-2-0, labels: {kdet.io/trial: $other-2}}
spec:
  restartPolicy: Never
  containers:
  - {name: worker, image: none, command: [sh, -c, 'echo from-worker']}
  - {name: sidecar, image: none, command: [sh, -c, 'echo from-sidecar']}
---
apiVersion: v1
kind: Pod
metadata: {name: $other-2-1, labels: {kdet.io/trial: $other-2}}
spec:
  restartPolicy: Never
  containers:
  - {name: worker, image: none, command: [sh, -c, 'echo rank-1']}
EOF
k apply -f "$tmp/trial2.yaml" > "$tmp/out" 2>&1 || bad "apply a trial with two pods" "$tmp/out"
check "trial logs -f of several pods and containers, prefixed" 0 "^\[$other-2-0/sidecar\] from-sidecar$" \
    -- timeout 60 "$det" trial logs "$other-2" -f
grep -q "^\[$other-2-0/worker\] from-worker$" "$tmp/out" && grep -q "^\[$other-2-1\] rank-1$" "$tmp/out" &&
    ok "each pod and container has its prefix" || bad "prefixes of several pods" "$tmp/out"
check "trial logs --tail 1: the last line only" 0 "^done$" -- "$det" trial logs "$other-1" --tail 1
[ "$(wc -l < "$tmp/out")" = 1 ] && ok "--tail 1 prints one line" || bad "--tail 1 lines" "$tmp/out"
check "trial logs --tail x: usage error" 2 "--tail x: expected a number of lines" -- "$det" trial logs "$other-1" --tail x
cat > "$tmp/trial3.yaml" <<EOF
apiVersion: kdet.io/v1alpha1
kind: Trial
metadata: {name: $other-3}
spec: {experiment: $other, requestId: r-000003, hparams: {lr: 0.2}, seed: 9}
EOF
k apply -f "$tmp/trial3.yaml" > "$tmp/out" 2>&1 &&
    k patch trial "$other-3" --subresource=status --type=merge -p '{"status":{"state":"COMPLETED"}}' >> "$tmp/out" 2>&1 ||
    bad "apply a completed trial without pods" "$tmp/out"
check "trial logs after the pods are gone: exit 5, the logs went with them" 5 \
    "trial $other-3 has no pods \(state COMPLETED\): its logs went with its pods" -- "$det" trial logs "$other-3"
check "experiment logs: every trial's lines, prefixed by the trial" 0 "^\[$other-1\] \[rank=0\] step 1$" \
    -- "$det" experiment logs "$other"
grep -q "^\[$other-2 $other-2-0/sidecar\] from-sidecar$" "$tmp/out" && grep -q "^\[$other-2 $other-2-1\] rank-1$" "$tmp/out" &&
    grep -q "^\[$other-1\] done$" "$tmp/out" && grep -q "trial $other-3 has no pods (state COMPLETED): its logs went with its pods" "$tmp/out" &&
    ok "experiment logs: [TRIAL POD] for several pods, a note for the trial without pods" || bad "experiment logs prefixes" "$tmp/out"
check "experiment logs --tail 1" 0 "^\[$other-1\] done$" -- "$det" experiment logs "$other" --tail 1
grep -q "step" "$tmp/out" && bad "--tail 1 printed earlier lines" "$tmp/out" || ok "experiment logs --tail 1: only the last line of each pod"
check "experiment logs -f follows every pod to its end" 0 "^\[$other-2 $other-2-1\] rank-1$" \
    -- timeout 60 "$det" experiment logs "$other" -f
[ "$(grep -c "^\[$other-1\] \[rank=0\] step" "$tmp/out")" = 3 ] && ok "experiment logs -f: every line once" || bad "experiment logs -f lines" "$tmp/out"
# ---- the best trials by the searcher metric (validation_loss, smaller is better)
bv() { k patch trial "$1" --subresource=status --type=merge -p "{\"status\":{\"bestValidation\":{\"metric\":\"validation_loss\",\"value\":$2,\"batches\":100}}}" > /dev/null; }
bv "$other-1" 0.5 && bv "$other-2" 0.25 || bad "patch bestValidation"
check "trial list --best 1: the best trial only" 0 "the 1 best of 3 trials by validation_loss \(smaller is better\)" \
    -- "$det" trial list "$other" --best 1
grep -qE "^- +$other-2 " "$tmp/out" && ! grep -qE "^- +$other-1 " "$tmp/out" && ok "--best 1 shows $other-2 (0.25)" ||
    bad "--best 1" "$tmp/out"
"$det" experiment list-trials "$other" --best 5 -o json > "$tmp/b.json" 2> "$tmp/out"
[ "$(python3 -c 'import json,sys; print(" ".join(t["metadata"]["name"] for t in json.load(open(sys.argv[1]))["items"]))' "$tmp/b.json")" = "$other-2 $other-1" ] &&
    ok "experiment list-trials --best 5 -o json: best first, the trial without a validation left out" || bad "list-trials --best 5" "$tmp/b.json"
k patch exp "$other" --type=merge -p '{"spec":{"searcher":{"smaller_is_better":false}}}' > /dev/null
"$det" e lt "$other" --best 1 > "$tmp/out" 2>&1
grep -qE "^- +$other-1 " "$tmp/out" && grep -q "(larger is better)" "$tmp/out" && ok "--best with smaller_is_better false: the largest first" ||
    bad "--best larger is better" "$tmp/out"
check "trial list --best 0: usage error" 2 "--best 0: expected a number of trials" -- "$det" trial list "$other" --best 0
check "trial logs of a missing trial" 5 "trial \"$other-9\" not found" -- "$det" trial logs "$other-9"

# ---- delete
check "delete without --yes and no terminal" 2 "pass --yes" -- "$det" experiment delete "$other" < /dev/null
check "delete --yes" 0 "experiment $other deleted" -- "$det" experiment delete "$other" --yes
k get exp "$other" > "$tmp/out" 2>&1 && bad "the experiment is still there" "$tmp/out" || ok "the experiment is gone"
gone=0
for _ in $(seq 50); do k get cm "$other-context" > /dev/null 2>&1 || { gone=1; break; }; sleep 0.1; done
[ $gone = 1 ] && ok "its context ConfigMap is gone" || bad "context ConfigMap still there"

kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
