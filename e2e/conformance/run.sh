#!/usr/bin/env bash
# Kubernetes API conformance checks for what kdet uses, driven by kubectl
# only, so the same script runs against kdet-local and a real cluster:
#
#   KUBECONFIG=~/.kube/config e2e/conformance/run.sh          # a real cluster
#   KD_LOCAL_BIN=build/bin/kdet-local e2e/conformance/run.sh  # starts kdet-local
#
# With neither, it prints a skip line and exits 0. Checks tagged local-only
# (bookmark timing, tiny watch history) run only against kdet-local.
# Prints `N passed, N failed`; exits non-zero when a check failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
data="$src/tests/data/local"
work=$(mktemp -d /tmp/kd-conf.XXXXXX)
pass=0 fail=0 local_pid=""
LOCAL=0

cleanup() {
    if [ -n "${NS:-}" ] && [ "$LOCAL" = 0 ]; then
        kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
        kubectl delete crd widgets.test.kdet.io gadgets.test.kdet.io --wait=false >/dev/null 2>&1
        kubectl delete crd badgadgets.test.kdet.io descgadgets.test.kdet.io --wait=false >/dev/null 2>&1
    fi
    if [ -n "$local_pid" ]; then
        kill "$local_pid" 2>/dev/null
        wait "$local_pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${KD_LOCAL_BIN:-}" ]; then
    LOCAL=1
    "$KD_LOCAL_BIN" --data-dir "$work/data" --port 0 --port-file "$work/port" \
        --kubeconfig-out "$work/kubeconfig" --bookmark-interval 1 --watch-history 40 --fake-gpus 2 \
        > "$work/kdet-local.log" 2>&1 &
    local_pid=$!
    for _ in $(seq 1 100); do [ -s "$work/kubeconfig" ] && break; sleep 0.05; done
    [ -s "$work/kubeconfig" ] || { echo "kdet-local did not start:"; cat "$work/kdet-local.log"; exit 1; }
    export KUBECONFIG="$work/kubeconfig"
elif [ -z "${KUBECONFIG:-}" ]; then
    echo "conformance: skipped (set KUBECONFIG to a cluster or KD_LOCAL_BIN to kdet-local)"
    echo "0 passed, 0 failed"
    exit 0
fi
export HOME="$work"   # a private kubectl discovery cache
NS=kdconf-$$
K="kubectl -n $NS"

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '     %s\n' "$@"; }
# expect NAME PATTERN CMD...: CMD's stdout+stderr must match the extended regex PATTERN.
expect() {
    local name=$1 pat=$2 out
    shift 2
    out=$("$@" 2>&1)
    if printf '%s' "$out" | grep -Eq -- "$pat"; then ok "$name"; else bad "$name" "want /$pat/" "got: $(printf '%s' "$out" | head -c 600)"; fi
}
# until_ok SECONDS CMD...: retry CMD until it succeeds.
until_ok() {
    local t=$1
    shift
    for _ in $(seq 1 $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
jp() { $K get "$1" -o "jsonpath=$2" 2>&1; }
# mkcm NAME [METADATA-JSON-FIELDS]: create a ConfigMap through JSON.
mkcm() {
    printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"%s}}' "$1" "${2:+,$2}" | $K create -f -
}
# names_of OUTPUT: the object names in watch output, in order.
names_of() { grep -o '"name":"[a-z0-9-]*","namespace"' | cut -d'"' -f4 | tr '\n' ' '; }

echo "== conformance against $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl create ns "$NS" >/dev/null 2>&1 || kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
YAML

# ---- discovery and namespaces --------------------------------------------------
expect "discovery lists configmaps and CRDs" 'customresourcedefinitions.*crd' kubectl api-resources
expect "discovery: short names" '^configmaps +cm ' kubectl api-resources
expect "namespaces default and kube-system exist" 'kube-system' kubectl get ns default kube-system
expect "version" 'Server Version' kubectl version
# (made by the controller-manager on a real cluster, so it may take a moment)
until_ok 20 $K get sa default
expect "a new namespace has a default ServiceAccount" '^serviceaccount/default$' $K get sa default -o name
expect "a namespace's name must be an RFC 1123 label" 'a lowercase RFC 1123 label must consist' kubectl create ns kdconf.dotted
expect "a service's name must be a DNS-1035 label" 'a DNS-1035 label must consist' \
    sh -c "echo '{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"1kdconf\"},\"spec\":{\"ports\":[{\"port\":80}]}}' | $K create -f -"
expect "a configmap's name may be an RFC 1123 subdomain" '^configmap/kdconf.dotted created$' $K create configmap kdconf.dotted

# ---- create/get/errors ----------------------------------------------------------
cat > "$work/cm.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata: {name: c1, labels: {tier: gold, app: x}}
data: {a: "1"}
YAML
expect "apply creates" 'configmap/c1 created' $K apply -f "$work/cm.yaml"
expect "apply again is unchanged" 'configmap/c1 unchanged' $K apply -f "$work/cm.yaml"
expect "uid is set" '^[0-9a-f]{8}-[0-9a-f]{4}-4' jp cm/c1 '{.metadata.uid}'
expect "creationTimestamp is RFC 3339" '^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$' jp cm/c1 '{.metadata.creationTimestamp}'
expect "create of an existing name is AlreadyExists" 'AlreadyExists.*configmaps "c1" already exists' $K create -f "$work/cm.yaml"
expect "get of a missing name is NotFound" 'NotFound.*configmaps "nope" not found' $K get cm nope
rv1=$(jp cm/c1 '{.metadata.resourceVersion}')
sed 's/"1"/"2"/' "$work/cm.yaml" | $K apply -f - >/dev/null
rv2=$(jp cm/c1 '{.metadata.resourceVersion}')
if [ "$rv2" -gt "$rv1" ] 2>/dev/null; then ok "resourceVersion grows on update"; else bad "resourceVersion grows on update" "$rv1 -> $rv2"; fi
$K get cm c1 -o json > "$work/c1.json"
sed "s/\"resourceVersion\": \"$rv2\"/\"resourceVersion\": \"$rv1\"/" "$work/c1.json" > "$work/stale.json"
expect "update with a stale resourceVersion is 409 Conflict" 'Conflict.*the object has been modified' $K replace -f "$work/stale.json"
expect "update with the current resourceVersion succeeds" 'replaced' $K replace -f "$work/c1.json"
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}' > "$work/bad.json"
expect "an invalid name is 422 Invalid naming metadata.name" 'is invalid: metadata.name: Invalid value: "Bad_Name"' $K create -f "$work/bad.json"
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}}' > "$work/gen.json"
expect "generateName makes a unique name" '^configmap/gen-[a-z0-9]{5} created' $K create -f "$work/gen.json"
expect "creating in a missing namespace is NotFound" 'namespaces "kdconf-missing-ns" not found' \
    kubectl -n kdconf-missing-ns create -f "$work/gen.json"

# Wrongly typed or oversized objects are refused, naming the field. kube-apiserver refuses a wrong
# JSON type while decoding (400, "cannot be handled as a ConfigMap: ... Data: ReadString: expects \" or n");
# kdet-local with a 422 per field.
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"typed"},"data":{"a":1}}' > "$work/typed.json"
expect "a ConfigMap whose data value is a number is refused, naming data" \
    '(is invalid: data\.a: Invalid value: "integer"|cannot be handled as a ConfigMap: .*[Dd]ata)' $K create -f "$work/typed.json"
python3 -c 'import json; print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"}, "data": {"a": "x" * 2000000}}))' > "$work/huge.json"
expect "a ConfigMap of 2 MB is refused (1 MiB at most)" 'is invalid: \[\]: Too long: must have at most 1048576 bytes' $K create -f "$work/huge.json"
python3 -c 'import json; print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge-ann", "annotations": {"a": "x" * 300000}}}))' > "$work/huge-ann.json"
expect "300 KB of annotations are refused (256 KiB at most)" 'metadata.annotations: Too long: must have at most 262144 bytes' $K create -f "$work/huge-ann.json"
expect "the refused objects were not stored" 'NotFound' $K get cm typed huge huge-ann
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"badkey"},"data":{"a b":"1"}}' > "$work/badkey.json"
expect "a ConfigMap key with a space is refused, naming it" 'data\[a b\]: Invalid value: "a b": a valid config key' $K create -f "$work/badkey.json"
expect "kubectl create configmap (protobuf)" 'configmap/gen-cm created' $K create configmap gen-cm --from-literal=a=1 --from-literal=b=2
expect "the protobuf ConfigMap's data" '^\{"a":"1","b":"2"\}$' jp cm/gen-cm '{.data}'
expect "kubectl create secret generic (protobuf)" 'secret/gen-sec created' $K create secret generic gen-sec --from-literal=key=AKIAEXAMPLE
expect "the protobuf Secret's data is base64" '^QUtJQUVYQU1QTEU=$' jp secret/gen-sec '{.data.key}'

# ---- patch ---------------------------------------------------------------------------
expect "merge patch" 'patched' $K patch cm c1 --type=merge -p '{"data":{"m":"1"}}'
expect "json patch" 'patched' $K patch cm c1 --type=json -p '[{"op":"add","path":"/data/j","value":"2"}]'
expect "strategic merge patch" 'patched' $K patch cm c1 -p '{"data":{"s":"3"}}'
expect "patches applied" '"j":"2".*"m":"1".*"s":"3"|"m":"1".*"j":"2".*"s":"3"' jp cm/c1 '{.data}'
# The real server's message does not name the failed operation (kdet-local's does): only the 422.
expect "json patch test failure is rejected" 'test|[Ii]nvalid|failed' $K patch cm c1 --type=json -p '[{"op":"test","path":"/data/m","value":"nope"}]'

# ---- selectors, paging --------------------------------------------------------------------
for n in 2 3 4; do mkcm "c$n" "\"labels\":{\"n\":\"$n\"}" >/dev/null; done
expect "labelSelector =" '^c1$' $K get cm -l tier=gold -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}'
expect "labelSelector in" '^c2 c3 $' $K get cm -l 'n in (2,3)' -o 'jsonpath={range .items[*]}{.metadata.name} {end}'
expect "labelSelector notin (matches objects without the key)" 'c1 c4 ' $K get cm -l 'n notin (2,3)' -o 'jsonpath={range .items[*]}{.metadata.name} {end}'
expect "labelSelector !key" '^c1 ' $K get cm -l '!n' -o 'jsonpath={range .items[*]}{.metadata.name} {end}'
expect "labelSelector key,!=" '^c2 c4 $' $K get cm -l 'n,n!=3' -o 'jsonpath={range .items[*]}{.metadata.name} {end}'
expect "fieldSelector metadata.name" '^c3 $' $K get cm --field-selector metadata.name=c3 -o 'jsonpath={range .items[*]}{.metadata.name} {end}'
expect "bad labelSelector is 400" 'unable to parse|BadRequest|couldn.t parse' $K get cm -l 'n in (2'
expect "unsupported fieldSelector is 400" 'field label not supported|not a known field selector' $K get cm --field-selector spec.foo=x
page1=$(kubectl get --raw "/api/v1/namespaces/$NS/configmaps?limit=2")
cont=$(printf '%s' "$page1" | sed -n 's/.*"continue":"\([^"]*\)".*/\1/p')
if [ -n "$cont" ] && [ "$(printf '%s' "$page1" | grep -o '"name":"c[0-9]"' | wc -l)" -eq 2 ]; then ok "limit returns a continue token"; else bad "limit returns a continue token" "$page1"; fi
page2=$(kubectl get --raw "/api/v1/namespaces/$NS/configmaps?limit=100&continue=$cont")
if printf '%s' "$page2" | grep -q '"name":"c4"' && ! printf '%s' "$page2" | grep -q '"name":"c1"'; then ok "continue returns the rest"; else bad "continue returns the rest" "$page2"; fi

# ---- watch ---------------------------------------------------------------------------------
rv=$(kubectl get --raw "/api/v1/namespaces/$NS/configmaps" | sed -n 's/.*"metadata":{"resourceVersion":"\([0-9]*\)".*/\1/p' | head -1)
kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&resourceVersion=$rv&timeoutSeconds=30" > "$work/watch.out" 2>&1 &
wpid=$!
mkcm w1 >/dev/null
$K patch cm w1 --type=merge -p '{"data":{"x":"1"}}' >/dev/null
$K delete cm w1 >/dev/null
# The watch started from $rv, so it sees all three even if it connected late.
for _ in $(seq 1 300); do grep -q '"type":"DELETED"' "$work/watch.out" && break; sleep 0.1; done
kill $wpid 2>/dev/null
wait $wpid 2>/dev/null
types=$(grep -o '"type":"[A-Z]*","object":{[^}]*"name":"w1"' "$work/watch.out" | cut -d'"' -f4 | tr '\n' ' ')
if [ "$types" = "ADDED MODIFIED DELETED " ]; then ok "watch from a resourceVersion: ADDED MODIFIED DELETED"; else bad "watch from a resourceVersion: ADDED MODIFIED DELETED" "got: $types" "$(head -c 400 "$work/watch.out")"; fi
expect "watch without resourceVersion starts with ADDED for existing objects" '"type":"ADDED".*"name":"c1"' \
    kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&timeoutSeconds=1"
got=$(kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&timeoutSeconds=1&labelSelector=n%3D2" | names_of)
if [ "$got" = "c2 " ]; then ok "watch with labelSelector filters"; else bad "watch with labelSelector filters" "got: $got"; fi
# kdet-controller watches the pods that are not trial pods with `!kdet.io/trial` (schedloop.c).
got=$(kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&timeoutSeconds=1&labelSelector=%21n" | names_of)
case " $got" in
*" c2 "* | *" c3 "* | *" c4 "*) bad "watch with labelSelector !key filters" "got: $got" ;;
*" c1 "*) ok "watch with labelSelector !key filters" ;;
*) bad "watch with labelSelector !key filters" "got: $got" ;;
esac
if [ "$LOCAL" = 1 ]; then
    for i in $(seq 1 60); do $K annotate cm c2 --overwrite "i=$i" >/dev/null; done
    expect "watch from a compacted resourceVersion gets an ERROR event with 410 Expired" \
        '"type":"ERROR","object":\{"kind":"Status".*"reason":"Expired","code":410' \
        kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&resourceVersion=$rv&timeoutSeconds=2"
    expect "allowWatchBookmarks sends BOOKMARK events" '"type":"BOOKMARK","object":\{"kind":"ConfigMap","apiVersion":"v1","metadata":\{"resourceVersion":"[0-9]+"' \
        kubectl get --raw "/api/v1/namespaces/$NS/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion=$(jp cm/c2 '{.metadata.resourceVersion}')"
fi

# ---- CRDs, generation, status subresource --------------------------------------------------
expect "apply a CRD" 'widgets.test.kdet.io (created|unchanged|configured)' kubectl apply -f "$data/crd-widgets.yaml"
until_ok 10 kubectl get crd widgets.test.kdet.io -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
expect "CRD becomes Established" 'True' kubectl get crd widgets.test.kdet.io -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
until_ok 10 $K get widgets
expect "apply a custom resource" 'widget.test.kdet.io/a created' $K apply -f "$data/widget-a.yaml"
expect "get by short name" '^NAME' $K get wd
expect "get by category" 'widget.test.kdet.io/a' $K get kdet -o name
expect "generation starts at 1" '^1$' jp wd/a '{.metadata.generation}'
$K label wd a extra=yes >/dev/null
expect "a metadata change keeps generation" '^1$' jp wd/a '{.metadata.generation}'
sed 's/size: 3/size: 4/' "$data/widget-a.yaml" | $K apply -f - >/dev/null
expect "a spec change bumps generation" '^2$' jp wd/a '{.metadata.generation}'
expect "status patch through the subresource" 'patched' $K patch wd a --subresource=status --type=merge -p '{"status":{"state":"Running","conditions":[{"type":"Ready","status":"True"}]}}'
expect "status write keeps generation" '^2 Running$' jp wd/a '{.metadata.generation} {.status.state}'
$K patch wd a --type=merge -p '{"status":{"state":"Hacked"},"spec":{"color":"blue"}}' >/dev/null 2>&1
expect "a write to the main resource ignores status" '^Running blue$' jp wd/a '{.status.state} {.spec.color}'
expect "kubectl get prints the CRD's printer columns" '^NAME +SIZE +STATE +AGE$' sh -c "$K get wd | head -1"
expect "printer column values" '^a +4 +Running +[0-9]+[smh]' sh -c "$K get wd a --no-headers=false | tail -1"
expect "kubectl wait --for=condition" 'condition met' $K wait --for=condition=Ready wd/a --timeout=10s
cat > "$work/bad-widget.yaml" <<YAML
apiVersion: test.kdet.io/v1
kind: Widget
metadata: {name: bad}
spec: {size: 300, color: pink, name: "X1"}
YAML
# Every cause, in whatever order the server lists them (kube-apiserver: schema order).
$K apply -f "$work/bad-widget.yaml" > "$work/bad-widget.out" 2>&1
if grep -q 'is invalid' "$work/bad-widget.out" && grep -q 'spec.color: Unsupported value: "pink"' "$work/bad-widget.out" &&
    grep -q 'spec.size: Invalid value: 300' "$work/bad-widget.out"; then
    ok "schema validation: 422 Invalid with every cause"
else
    bad "schema validation: 422 Invalid with every cause" "got: $(tr '\n' ' ' < "$work/bad-widget.out" | head -c 600)"
fi
expect "schema validation on update" 'spec.size: Invalid value: 0' $K patch wd a --type=merge -p '{"spec":{"size":0}}'
printf 'apiVersion: test.kdet.io/v1\nkind: Widget\nmetadata: {name: u}\nspec: {size: 2, extra: 1}\n' > "$work/unknown.yaml"
# Server-side (fieldValidation=Strict, 1.25+) or, against older servers, kubectl's own schema check.
expect "unknown fields are rejected under fieldValidation=Strict" 'strict decoding error: unknown field "spec.extra"|unknown field "extra"' $K apply -f "$work/unknown.yaml"
$K apply -f "$work/unknown.yaml" --validate=false >/dev/null 2>&1
expect "unknown fields are pruned otherwise" '^\{"size":2\}$' jp wd/u '{.spec}'
expect "strategic merge patch on a custom resource is 415" 'UnsupportedMediaType|unknown format|415|not supported' \
    $K patch wd a --type=strategic -p '{"spec":{"size":5}}'

# ---- int-or-string and value validations in CRD schemas ------------------------------------------
expect "a CRD with int-or-string anyOf [integer, string] is accepted" 'gadgets.test.kdet.io (created|unchanged|configured)' \
    kubectl apply -f "$data/crd-gadgets.yaml"
until_ok 10 $K get gadgets
# gadget NAME SPEC-JSON: create a Gadget; the server alone validates it (--validate=false).
gadget() {
    printf '{"apiVersion":"test.kdet.io/v1","kind":"Gadget","metadata":{"name":"%s"},"spec":%s}' "$1" "$2" |
        $K create --validate=false -f - 2>&1 | tr '\n' ' '
}
expect "int-or-string fields take integers" 'gadget.test.kdet.io/g1 created' \
    gadget g1 '{"port":8080,"limits":{"cpu":2},"maxUnavailable":1,"replicas":3,"mode":{"a":"x"}}'
expect "int-or-string fields take strings" 'gadget.test.kdet.io/g2 created' \
    gadget g2 '{"port":"http","limits":{"cpu":"500m","memory":"1Gi"},"maxUnavailable":"25%"}'
expect "int-or-string stored as sent" '^http 500m 1Gi 25%$' jp gadget/g2 '{.spec.port} {.spec.limits.cpu} {.spec.limits.memory} {.spec.maxUnavailable}'
expect "int-or-string rejects a boolean" 'is invalid.*spec\.port' gadget g3 '{"port":true}'
expect "int-or-string rejects a fraction" 'is invalid.*spec\.port' gadget g3 '{"port":1.5}'
expect "int-or-string rejects an object" 'is invalid.*spec\.limits\.cpu' gadget g3 '{"limits":{"cpu":{"n":1}}}'
expect "a quantity string must match the pattern" 'is invalid.*spec\.limits\.cpu.*should match' gadget g3 '{"limits":{"cpu":"lots"}}'
expect "not: a forbidden value is rejected" 'is invalid.*must not validate the schema \(not\)' gadget g3 '{"replicas":13}'
expect "allOf with the int-or-string anyOf: its other items apply" 'is invalid.*allOf' gadget g3 '{"maxUnavailable":"0"}'
expect "oneOf: none valid is rejected" 'is invalid.*oneOf' gadget g3 '{"mode":{}}'
expect "oneOf: two valid is rejected" 'is invalid.*oneOf' gadget g3 '{"mode":{"a":"x","b":"y"}}'
if $K get gadget g3 >/dev/null 2>&1; then bad "rejected gadgets are not stored"; else ok "rejected gadgets are not stored"; fi
# The int-or-string exception is exactly anyOf [integer, string]: other types under anyOf are not structural.
sed -e 's/gadgets\.test/badgadgets.test/; s/plural: gadgets/plural: badgadgets/; s/singular: gadget/singular: badgadget/; s/kind: Gadget/kind: BadGadget/' \
    -e '0,/- type: integer/s//- type: string/' -e '0,/- type: string$/!{0,/- type: string$/s//- type: integer/}' \
    "$data/crd-gadgets.yaml" > "$work/crd-badgadgets.yaml"
expect "anyOf [string, integer] is not the int-or-string form: rejected" 'is invalid.*anyOf\[[01]\]\.type: Forbidden: must be empty to be structural' \
    sh -c "kubectl create -f '$work/crd-badgadgets.yaml' 2>&1 | tr '\n' ' '"
sed -e 's/gadgets\.test/descgadgets.test/; s/plural: gadgets/plural: descgadgets/; s/singular: gadget/singular: descgadget/; s/kind: Gadget/kind: DescGadget/' \
    -e 's/^\( *\)enum: \[13\]/\1enum: [13]\n\1description: never thirteen/' "$data/crd-gadgets.yaml" > "$work/crd-descgadgets.yaml"
expect "a description inside not is rejected" 'is invalid.*not\.description: Forbidden: must be empty to be structural' \
    sh -c "kubectl create -f '$work/crd-descgadgets.yaml' 2>&1 | tr '\n' ' '"

# ---- finalizers and garbage collection -------------------------------------------------------
mkcm fin >/dev/null
$K patch cm fin --type=merge -p '{"metadata":{"finalizers":["kdet.io/test"]}}' >/dev/null
$K delete cm fin --wait=false >/dev/null 2>&1
expect "delete with a finalizer sets deletionTimestamp" '^20.*Z kdet.io/test$' jp cm/fin '{.metadata.deletionTimestamp} {.metadata.finalizers[0]}'
$K patch cm fin --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1
if until_ok 10 sh -c "! $K get cm fin"; then ok "removing the last finalizer deletes"; else bad "removing the last finalizer deletes"; fi

owner_dep() { # NAME POLICY: an owner configmap and one dependent
    mkcm "$1-owner" >/dev/null
    local uid
    uid=$(jp "cm/$1-owner" '{.metadata.uid}')
    printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s-dep","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"%s-owner","uid":"%s","blockOwnerDeletion":true}]}}' "$1" "$1" "$uid" | $K create -f - >/dev/null
}
owner_dep bg
$K delete cm bg-owner --cascade=background >/dev/null
if until_ok 20 sh -c "! $K get cm bg-dep"; then ok "background cascade deletes dependents"; else bad "background cascade deletes dependents"; fi
owner_dep or
$K delete cm or-owner --cascade=orphan >/dev/null
sleep 1
if $K get cm or-dep >/dev/null 2>&1 && [ -z "$(jp cm/or-dep '{.metadata.ownerReferences}')" ]; then ok "orphan cascade keeps dependents and drops the reference"; else bad "orphan cascade keeps dependents and drops the reference" "$($K get cm or-dep -o json 2>&1 | head -c 300)"; fi
owner_dep fg
$K delete cm fg-owner --cascade=foreground --timeout=20s >/dev/null 2>&1
if until_ok 20 sh -c "! $K get cm fg-dep && ! $K get cm fg-owner"; then ok "foreground cascade deletes dependents, then the owner"; else bad "foreground cascade deletes dependents, then the owner"; fi
# An owner that never existed (its uid matches nothing): the dependent is collected.
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ghost-dep","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost-owner","uid":"00000000-0000-4000-8000-000000000001"}]}}' | $K create -f - >/dev/null
if until_ok 20 sh -c "! $K get cm ghost-dep"; then ok "a dependent of an owner that does not exist is collected"; else bad "a dependent of an owner that does not exist is collected"; fi
# Two owners, one deleted: the dependent stays, with only the live owner's reference.
mkcm two-a >/dev/null
mkcm two-b >/dev/null
ua=$(jp cm/two-a '{.metadata.uid}'); ub=$(jp cm/two-b '{.metadata.uid}')
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"two-dep","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"two-a","uid":"%s"},{"apiVersion":"v1","kind":"ConfigMap","name":"two-b","uid":"%s"}]}}' "$ua" "$ub" | $K create -f - >/dev/null
$K delete cm two-a >/dev/null
if until_ok 20 sh -c "[ \"\$($K get cm two-dep -o 'jsonpath={.metadata.ownerReferences[*].name}')\" = two-b ]"; then ok "a dependent with a live owner left keeps only that reference"; else bad "a dependent with a live owner left keeps only that reference" "$(jp cm/two-dep '{.metadata.ownerReferences}')"; fi
$K delete cm two-b >/dev/null
if until_ok 20 sh -c "! $K get cm two-dep"; then ok "... and goes with its last owner"; else bad "... and goes with its last owner"; fi

# ---- pods and the node ---------------------------------------------------------------------------
# pod NAME RESTART-POLICY SCRIPT [EXTRA-CONTAINER-JSON] [EXTRA-SPEC-JSON]: a one-container busybox
# pod running `sh -c SCRIPT`.
pod() {
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"restartPolicy":"%s","terminationGracePeriodSeconds":2,"containers":[{"name":"main","image":"busybox","command":["sh","-c",%s]%s}]%s}}' \
        "$1" "$2" "$(printf '%s' "$3" | sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$/"/')" "${4:-}" "${5:-}" | $K create -f - >/dev/null
}
phase_is() { [ "$($K get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null)" = "$2" ]; }
node=$(kubectl get nodes -o 'jsonpath={.items[0].metadata.name}')
expect "a Node is registered and Ready" '^True$' kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'
expect "the Node reports cpu, memory and pods capacity" '^[0-9]+ [0-9]+Ki [0-9]+$' kubectl get node "$node" -o 'jsonpath={.status.capacity.cpu} {.status.capacity.memory} {.status.capacity.pods}'
expect "the Node has the usual labels" "^$node linux amd64\$" kubectl get node "$node" -o 'jsonpath={.metadata.labels.kubernetes\.io/hostname} {.metadata.labels.kubernetes\.io/os} {.metadata.labels.kubernetes\.io/arch}'
# Pods with wrongly typed fields, bad quantities or a container name that is a path are refused,
# naming the field (kube-apiserver: a 400 from its decoder for types and quantity syntax, 422 for the rest).
badpod() { # NAME CONTAINER-JSON [SPEC-FIELDS]
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{%s"containers":[%s]}}' "$1" "${3:-}" "$2" > "$work/$1.json"
    $K create -f "$work/$1.json"
}
expect "a pod whose command is a number is refused, naming spec.containers[0].command" \
    'spec\.containers(\[0\])?\.command' badpod bad-cmd '{"name":"main","image":"busybox","command":5}'
expect "a pod whose volumes is a string is refused, naming spec.volumes" \
    'spec\.volumes' badpod bad-vol '{"name":"main","image":"busybox","command":["true"]}' '"volumes":"x",'
expect "a cpu request \"abc\" is refused" 'quantities must match the regular expression' \
    badpod bad-cpu '{"name":"main","image":"busybox","command":["true"],"resources":{"requests":{"cpu":"abc"}}}'
expect "a GPU limit of -3 is refused, naming the field" \
    'spec\.containers\[0\]\.resources\.limits\[nvidia\.com/gpu\]: Invalid value: "-3": must be greater than or equal to 0' \
    badpod bad-gpu '{"name":"main","image":"busybox","command":["true"],"resources":{"limits":{"nvidia.com/gpu":"-3"}}}'
expect "a container named ../../../../tmp/x is refused, naming spec.containers[0].name" \
    'spec\.containers\[0\]\.name: Invalid value: "\.\./\.\./\.\./\.\./tmp/x"' \
    badpod bad-name '{"name":"../../../../tmp/x","image":"busybox","command":["true"]}'
expect "none of them was stored" '^0$' sh -c "$K get pods -o name 2>&1 | grep -cE 'bad-(cmd|vol|cpu|gpu|name)'"
expect "kubectl describe node still works" '^Name: ' sh -c "kubectl describe node '$node' 2>&1 | head -1"
pod ok Never 'echo hello from $(POD); echo second line; exit 0' ',"env":[{"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]'
pod fails Never 'echo failing; exit 3'
expect "kubectl get pods prints READY STATUS RESTARTS AGE" '^NAME +READY +STATUS +RESTARTS +AGE$' sh -c "$K get pods | head -1"
until_ok 60 phase_is ok Succeeded
expect "a pod that exits 0 is Succeeded" '^Succeeded 0 Completed$' jp pod/ok '{.status.phase} {.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}'
expect "pod status has podIP, hostIP, startTime and conditions" '^[0-9.]+ [0-9.]+ 20.*Z True$' jp pod/ok '{.status.podIP} {.status.hostIP} {.status.startTime} {.status.conditions[?(@.type=="PodScheduled")].status}'
expect "container logs, with \$(VAR) expansion and the downward API" '^hello from ok' $K logs ok
expect "logs --tail" '^second line$' $K logs ok --tail=1
until_ok 30 phase_is fails Failed
expect "a pod that exits 3 with restartPolicy Never is Failed" '^Failed 3 Error$' jp pod/fails '{.status.phase} {.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}'
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"podcfg"},"data":{"greeting":"hi","file.txt":"from a configmap"}}' | $K create -f - >/dev/null
printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"podsec"},"stringData":{"token":"s3cret"}}' | $K create -f - >/dev/null
expect "a Secret's stringData is stored as base64 data" '^czNjcmV0$' jp secret/podsec '{.data.token}'
vol="/tmp/$NS-vol"
printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"full"},"spec":{"restartPolicy":"Never","initContainers":[
 {"name":"i1","image":"busybox","command":["sh","-c","echo i1 > %s-e/order"],"volumeMounts":[{"name":"e","mountPath":"%s-e"}]},
 {"name":"i2","image":"busybox","command":["sh","-c","echo i2 >> %s-e/order"],"volumeMounts":[{"name":"e","mountPath":"%s-e"}]}],
 "containers":[{"name":"main","image":"busybox","command":["sh","-c","cat %s-e/order; echo G=$G T=$T P=$SEC_token; cat %s-c/file.txt; echo; cat %s-s/token; echo"],
  "env":[{"name":"G","valueFrom":{"configMapKeyRef":{"name":"podcfg","key":"greeting"}}},{"name":"T","valueFrom":{"secretKeyRef":{"name":"podsec","key":"token"}}}],
  "envFrom":[{"secretRef":{"name":"podsec"},"prefix":"SEC_"}],
  "volumeMounts":[{"name":"e","mountPath":"%s-e"},{"name":"c","mountPath":"%s-c"},{"name":"s","mountPath":"%s-s"}]}],
 "volumes":[{"name":"e","emptyDir":{}},{"name":"c","configMap":{"name":"podcfg"}},{"name":"s","secret":{"secretName":"podsec"}}]}}' \
    "$vol" "$vol" "$vol" "$vol" "$vol" "$vol" "$vol" "$vol" "$vol" "$vol" | $K create -f - >/dev/null
until_ok 60 phase_is full Succeeded
expect "init containers run in order before the app container" '^i1 i2 ' sh -c "$K logs full -c main | tr '\n' ' '"
expect "env from ConfigMap and Secret keys, envFrom with a prefix" 'G=hi T=s3cret P=s3cret' $K logs full -c main
expect "configMap and secret volumes as files" 'from a configmap s3cret' sh -c "$K logs full -c main | tr '\n' ' '"
pod flaky OnFailure "if [ -f $vol-f/x ]; then echo second run; exit 0; fi; touch $vol-f/x; echo first run; exit 1" \
    ',"volumeMounts":[{"name":"f","mountPath":"'"$vol-f"'"}]' ',"volumes":[{"name":"f","emptyDir":{}}]'
until_ok 60 phase_is flaky Succeeded
expect "restartPolicy OnFailure restarts a failed container" '^Succeeded 1 1$' jp pod/flaky '{.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.exitCode}'
expect "logs --previous shows the last run" '^first run$' $K logs flaky --previous
expect "logs shows the current run" '^second run$' $K logs flaky
# kubectl adds " (10s ago)" when it prints the table itself; 1.20 servers print it without.
expect "kubectl get shows restarts and the phase" '^flaky +0/1 +Completed +1( \(| *$| )' sh -c "$K get pod flaky --no-headers"
pod runner Always 'echo started; trap "echo term; exit 0" TERM; while true; do sleep 0.1; done'
expect "kubectl wait --for=condition=Ready on a pod" 'condition met' $K wait --for=condition=Ready pod/runner --timeout=60s
( $K logs -f runner > "$work/follow.out" 2>&1 ) &
fpid=$!
sleep 1
start=$(date +%s)
$K delete pod runner --wait=true >/dev/null 2>&1
took=$(( $(date +%s) - start ))
wait $fpid
if [ "$took" -le 4 ] && ! $K get pod runner >/dev/null 2>&1; then ok "delete sends SIGTERM: a pod that exits on TERM goes at once (${took}s)"; else bad "delete sends SIGTERM: a pod that exits on TERM goes at once" "took ${took}s"; fi
expect "logs -f follows until the container ends" '^started term $' sh -c "tr '\n' ' ' < $work/follow.out"
pod stubborn Always 'trap "" TERM; while true; do sleep 0.1; done'
$K wait --for=condition=Ready pod/stubborn --timeout=60s >/dev/null
start=$(date +%s)
$K delete pod stubborn --wait=true >/dev/null 2>&1
took=$(( $(date +%s) - start ))
if [ "$took" -ge 1 ] && [ "$took" -le 8 ] && ! $K get pod stubborn >/dev/null 2>&1; then ok "SIGKILL after terminationGracePeriodSeconds (${took}s)"; else bad "SIGKILL after terminationGracePeriodSeconds" "took ${took}s"; fi
pod huge Never 'true' ',"resources":{"requests":{"cpu":"100000"}}'
until_ok 20 sh -c "$K get pod huge -o 'jsonpath={.status.conditions[0].reason}' | grep -q Unschedulable"
expect "a pod that does not fit is Unschedulable, as the scheduler reports it" '^Pending False Unschedulable 0/[0-9]+ nodes are available: .*Insufficient cpu' \
    jp pod/huge '{.status.phase} {.status.conditions[?(@.type=="PodScheduled")].status} {.status.conditions[?(@.type=="PodScheduled")].reason} {.status.conditions[?(@.type=="PodScheduled")].message}'
expect "a FailedScheduling event explains it" 'Warning +FailedScheduling .*Insufficient cpu' sh -c "$K describe pod huge | tail -5"
evs=$($K get events --field-selector involvedObject.name=ok -o 'jsonpath={range .items[*]}{.reason}:{.source.component}{.reportingComponent} {end}')
case "$evs" in *Scheduled:default-scheduler*Started:kubelet*|*Started:kubelet*Scheduled:default-scheduler*) ok "Scheduled and Started events for a pod that ran" ;; *) bad "Scheduled and Started events for a pod that ran" "$evs" ;; esac
pod picky Never 'true' '' ',"nodeSelector":{"kdet.io/no-such-label":"x"}'
until_ok 20 sh -c "$K get pod picky -o 'jsonpath={.status.conditions[0].reason}' | grep -q Unschedulable"
expect "nodeSelector is honoured" "didn't match Pod's node affinity" jp pod/picky '{.status.conditions[?(@.type=="PodScheduled")].message}'
expect "an unknown priorityClassName is Forbidden" 'Forbidden.*no PriorityClass with name kdconf-nope was found' \
    sh -c "printf '{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"np\"},\"spec\":{\"priorityClassName\":\"kdconf-nope\",\"containers\":[{\"name\":\"m\",\"image\":\"busybox\"}]}}' | $K create -f -"
$K delete pod huge picky ok fails full flaky --wait=false >/dev/null 2>&1
if [ "$LOCAL" = 0 ]; then
    # A real API server mounts the namespace's default service-account token; a
    # client in the pod acts as that service account (which may list nothing).
    pod whoami Never 'kubectl get pods -o name 2>&1; true'
    until_ok 60 phase_is whoami Succeeded
    expect "a pod reaches the API as its service account" "system:serviceaccount:$NS:default" $K logs whoami
    $K delete pod whoami --wait=false >/dev/null 2>&1
fi
if [ "$LOCAL" = 1 ]; then
    # A process pod has no service account token: KUBECONFIG points it at kdet-local.
    pod selfcheck Never 'kubectl get ns default -o name'
    until_ok 60 phase_is selfcheck Succeeded
    expect "a pod reaches the API through the KUBECONFIG it is given" '^namespace/default$' $K logs selfcheck
    # GPUs: two fake GPUs, each pod gets its own, a third waits; then priority decides.
    printf '{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"kdconf-high"},"value":1000}' | kubectl create -f - >/dev/null
    gpu=',"resources":{"limits":{"nvidia.com/gpu":1}}'
    # gpu-a, gpu-b and gpu-high hold their GPU until the file named after them exists.
    hold() { printf 'echo dev=$CUDA_VISIBLE_DEVICES; until [ -f %s ]; do sleep 0.1; done' "$work/release-$1"; }
    pod gpu-a Never "$(hold gpu-a)" "$gpu"
    pod gpu-b Never "$(hold gpu-b)" "$gpu"
    until_ok 60 sh -c "$K logs gpu-a | grep -q dev= && $K logs gpu-b | grep -q dev="
    ga=$($K logs gpu-a); gb=$($K logs gpu-b)
    if [ "$ga" != "$gb" ] && printf '%s %s' "$ga" "$gb" | grep -Eq '^dev=[01] dev=[01]$'; then ok "each GPU pod gets its own device in CUDA_VISIBLE_DEVICES ($ga, $gb)"; else bad "each GPU pod gets its own device in CUDA_VISIBLE_DEVICES" "$ga / $gb"; fi
    unsched() { $K get pod "$1" -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}' | grep -q 'Insufficient nvidia.com/gpu'; }
    pod gpu-low Never 'echo dev=$CUDA_VISIBLE_DEVICES' "$gpu"
    until_ok 30 unsched gpu-low
    pod gpu-high Never "$(hold gpu-high)" "$gpu" ',"priorityClassName":"kdconf-high"'
    expect "priorityClassName sets spec.priority" '^1000$' jp pod/gpu-high '{.spec.priority}'
    expect "a third GPU pod waits: Insufficient nvidia.com/gpu" 'Insufficient nvidia.com/gpu' jp pod/gpu-low '{.status.conditions[?(@.type=="PodScheduled")].message}'
    until_ok 30 unsched gpu-high
    # One GPU frees up: gpu-high (created later) must get it, gpu-low keeps waiting.
    touch "$work/release-gpu-a"
    until_ok 30 sh -c "$K get pod gpu-high -o jsonpath='{.spec.nodeName}' | grep -q ."
    expect "the higher priority pod is bound first" '^Pending $' jp pod/gpu-low '{.status.phase} {.spec.nodeName}'
    touch "$work/release-gpu-b" "$work/release-gpu-high"
    $K delete pod gpu-a gpu-b gpu-low gpu-high --wait=false >/dev/null 2>&1
    kubectl delete priorityclass kdconf-high >/dev/null 2>&1
fi

# ---- deleting a CRD removes its kind -------------------------------------------------------------
if [ "$LOCAL" = 1 ]; then
    kubectl delete crd widgets.test.kdet.io >/dev/null 2>&1
    if until_ok 10 sh -c "! kubectl api-resources --api-group=test.kdet.io | grep -q widgets"; then ok "deleting a CRD stops serving its kind"; else bad "deleting a CRD stops serving its kind"; fi
fi

if [ -n "$local_pid" ]; then
    kill "$local_pid"
    if wait "$local_pid"; then ok "kdet-local stops cleanly on SIGTERM (and leak-free under ASan)"; else bad "kdet-local stops cleanly on SIGTERM (and leak-free under ASan)" "$(tail -n 40 "$work/kdet-local.log")"; fi
    local_pid=""
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
