#!/usr/bin/env bash
# The model registry end to end (docs/models.md): kdet-controller on a
# private PostgreSQL and kdet-local, driven through det and the API. A shell
# worker on the API saves real checkpoints (dtrain ckpt upload to shared_fs)
# at 10, 20 and 30 batches with a validation at each (loss lr+0.5, lr,
# lr+0.05) and registers them; trial reg-1 is held after its last one. Its
# checkpoints are registered as versions of a model (capturing experiment,
# trial, hyperparameters and the validation at each), described, listed,
# ranked by loss, changed, downloaded; wrong tokens and namespaces are
# refused, bad bodies named. Under save_trial_best=1 alone GC would delete
# the checkpoints at 10 and 30: registered ones survive it, and each is
# collected once the version (or the model) that protected it is deleted.
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 4 || exit 1
start_ctrl_api
DET=$KD_BUILD/bin/det
: >"$T/names"

cp "$KD_SRC/tests/controller/support/ckpt_worker.sh" "$T/worker.sh"

mkdir -p "$T/ckpt"
experiment reg "  entrypoint: sh $T/worker.sh metrics-first
  environment:
    environment_variables: [OUTDIR=$T, DTRAIN=$KD_BUILD/bin/dtrain, CKPT=$T/ckpt, HOLD=reg-1]
  hyperparameters:
    lr: {type: categorical, vals: [0.1, 0.2]}
  searcher: {name: grid, metric: loss, smaller_is_better: true, max_length: {batches: 30}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt, save_experiment_best: 0, save_trial_best: 1, save_trial_latest: 0}
  max_restarts: 0
  resources: {slots_per_trial: 1}"

uuid_of() { awk -v n="$1" '$2 == n { print $1; exit }' "$T/names"; }
state_of() { psqlq "select state from checkpoints where uuid = '$(uuid_of "$1")'"; }
on_disk() { [ -f "$T/ckpt/$(uuid_of "$1")/kdet-manifest.json" ]; }
# api METHOD PATH [BODY]: the status code; the answer in $T/body. TOK and NSP override the token
# and the namespace.
api() {
    curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer ${TOK-$KDET_API_TOKEN}" -X "$1" \
        ${3:+-H 'Content-Type: application/json' -d "$3"} "$URL/api/v1/namespaces/${NSP:-default}/$2"
}
field_is() { [ "$(jq -r "$1" "$T/body")" = "$2" ]; }
refused() { # refused CODE FIELD METHOD PATH [BODY]: answered CODE naming FIELD
    local want=$1 f=$2
    shift 2
    local got
    got=$(api "$@")
    [ "$got" = "$want" ] && field_is .field "$f" || { echo "# $*: $got $(cat "$T/body")"; return 1; }
}

check "det model create" eval "'$DET' model create mnist --description 'fashion classifier' --label prod,vision >'$T/out' &&
    grep -q 'model mnist created in namespace default' '$T/out'"
check "a taken name is refused (409)" eval "! '$DET' model create mnist 2>'$T/err' && grep -q 'already exists' '$T/err'"
reg1_ready() { for s in 10 20 30; do [ "$(state_of reg-1-$s)" = ACTIVE ] || return 1; done; }
check "the held trial registered its three checkpoints" wait_for 90 reg1_ready
check "the other trial ended and GC deleted its checkpoint at 10" wait_for 60 eval '[ "$(state_of reg-2-10)" = DELETED ]'

# Versions from the held trial's checkpoints: 10 and 30 are what the policy would delete.
U10=$(uuid_of reg-1-10) U20=$(uuid_of reg-1-20) U30=$(uuid_of reg-1-30)
check "register-version: version 1" eval "'$DET' model register-version mnist $U10 --comment 'first try' --label candidate \
    >'$T/out' && grep -q 'as version 1 of model mnist' '$T/out'"
check "register-version: version 2" eval "'$DET' model register-version mnist $U20 --name best-loss >/dev/null"
check "register-version: version 3 by the API (201)" test "$(api POST models/mnist/versions "{\"checkpoint_uuid\":\"$U30\",\"name\":\"last\",\"metadata\":{\"k\":1}}")" = 201
check "the version captured experiment, trial, batches, hyperparameters and its validation" eval \
    "field_is '[.version.version, .version.experiment, .version.steps_completed, .version.hparams.lr, .version.metrics.loss, .version.config.searcher.metric] | join(\" \")' '3 reg 30 0.1 0.15 loss'"
check "a DELETED checkpoint is refused (409 naming checkpoint_uuid)" refused 409 checkpoint_uuid POST models/mnist/versions \
    "{\"checkpoint_uuid\":\"$(uuid_of reg-2-10)\"}"
check "det says so too" eval "! '$DET' model register-version mnist $(uuid_of reg-2-10) 2>'$T/err' && grep -q 'DELETED' '$T/err'"

check "det model describe lists the three versions" eval "'$DET' model describe mnist >'$T/out' &&
    grep -q '^Description:  fashion classifier' '$T/out' && grep -q '^Labels:       prod,vision' '$T/out' &&
    [ \"\$(grep -cE '^[123] ' '$T/out')\" = 3 ] && grep -qE '^3 +last +$U30 +ACTIVE +reg ' '$T/out'"
sed 's/^/# /' "$T/out"
check "det model describe --json" eval "'$DET' model describe mnist --json | jq -e '.versions | length == 3 and .[0].metrics.loss == 0.6' >/dev/null"
check "best by loss (smaller is better): version 2" eval "'$DET' model describe mnist --best loss --json | jq -e '.version == 2 and .value == 0.1' >/dev/null"
check "best by loss, larger is better: version 1" eval "'$DET' model describe mnist --best loss --order desc --json | jq -e '.version == 1' >/dev/null"
check "best by a metric no version has: 404 naming metric" refused 404 metric GET "models/mnist/best?metric=accuracy"
check "det model list" eval "'$DET' model list >'$T/out' && grep -qE '^mnist +3 +3 +prod,vision ' '$T/out'"
check "det model list --label, --name" eval "[ \"\$('$DET' model list --label prod --json | jq -r '.[].name')\" = mnist ] &&
    [ \"\$('$DET' model list --name NIS --json | jq -r '.[].name')\" = mnist ] && '$DET' model list --label nope 2>&1 | grep -q 'no models'"
check "det model update adds and removes labels" eval "'$DET' model update mnist --add-label v2 --remove-label vision --description d2 >/dev/null &&
    '$DET' model describe mnist --json | jq -e '.model.labels == [\"prod\",\"v2\"] and .model.description == \"d2\"' >/dev/null"
check "det model update-version" eval "'$DET' model update-version mnist 1 --comment 'too early' --add-label old >/dev/null &&
    '$DET' model describe mnist --json | jq -e '.versions[0].comment == \"too early\" and .versions[0].labels == [\"candidate\",\"old\"]' >/dev/null"
check "det model download NAME:VERSION restores the checkpoint's files" eval "'$DET' model download mnist:2 -o '$T/dl2' >/dev/null 2>&1 &&
    [ \"\$(cat '$T/dl2/model.bin')\" = 'reg-1 20' ]"
check "det model download NAME takes the latest version" eval "'$DET' model download mnist -o '$T/dl3' >/dev/null 2>&1 &&
    [ \"\$(cat '$T/dl3/model.bin')\" = 'reg-1 30' ]"
# The API's download (docs/api.md, "Downloads"): the files det restores, as one tar archive.
check "GET .../models/mnist/versions/2/download: 200" test "$(curl -s -o "$T/v2.tar" -w '%{http_code}' \
    -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/api/v1/namespaces/default/models/mnist/versions/2/download")" = 200
mkdir -p "$T/x2"
check "... the tree det model download restored, under mnist-v2/" eval "tar -xf '$T/v2.tar' -C '$T/x2' && diff -r '$T/dl2' '$T/x2/mnist-v2'"
check "... and refused with a wrong token (401)" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nobody' \
    "$URL/api/v1/namespaces/default/models/mnist/versions/2/download")" = 401

# Bad input: each refusal names its field.
check "unknown field" refused 400 descripton POST models '{"name":"x","descripton":"d"}'
check "a bad name" refused 400 name POST models '{"name":"../x"}'
check "a name too long" refused 400 name POST models "{\"name\":\"$(printf 'm%.0s' $(seq 129))\"}"
check "labels not an array" refused 400 labels POST models '{"name":"x","labels":"prod"}'
check "a label not a string" refused 400 'labels[1]' POST models '{"name":"x","labels":["a",2]}'
check "metadata not an object" refused 400 metadata POST models '{"name":"x","metadata":[1]}'
check "archived not a boolean" refused 400 archived PATCH models/mnist '{"archived":"yes"}'
check "checkpoint_uuid missing" refused 400 checkpoint_uuid POST models/mnist/versions '{"name":"x"}'
check "checkpoint_uuid not an id" refused 400 checkpoint_uuid POST models/mnist/versions '{"checkpoint_uuid":"../../etc"}'
check "an unknown checkpoint: 404 naming checkpoint_uuid" refused 404 checkpoint_uuid POST models/mnist/versions \
    '{"checkpoint_uuid":"00000000-0000-4000-8000-000000000000"}'
check "a version that is not a number" refused 400 version GET models/mnist/versions/x1
check "best without a metric" refused 400 metric GET models/mnist/best
check "a bad sort" refused 400 sort GET "models?sort=size"
check "det refuses --metadata that is not an object" eval "! '$DET' model update mnist --metadata '[1]' 2>'$T/err' && grep -q 'metadata' '$T/err'"
check "an unknown model: 404" test "$(api GET models/nope)" = 404
check "a DELETE with a body is refused before it is read (413)" test "$(api DELETE models/mnist '{}')" = 413

# Tokens and namespaces, as for experiments.
check "no token: 401" eval "[ \"\$(TOK= api GET models)\" = 401 ]"
check "a wrong token: 401" eval "[ \"\$(TOK=kdet_1_wrongwrongwrongwrongwrongwrongwrongwr api GET models)\" = 401 ]"
check "make a user of namespace team-b" eval "curl -sf -H 'Authorization: Bearer $KDET_API_TOKEN' -X POST \
    -d '{\"name\":\"bob\",\"namespaces\":[\"team-b\"]}' '$URL/api/v1/users' >'$T/bob'"
BOB=$(jq -r .token "$T/bob")
check "another namespace's user: 403 on list, describe, register, delete" eval "[ \"\$(TOK=$BOB api GET models) \$(TOK=$BOB api GET models/mnist) \
\$(TOK=$BOB api POST models/mnist/versions '{\"checkpoint_uuid\":\"$U20\"}') \$(TOK=$BOB api DELETE models/mnist)\" = '403 403 403 403' ]"
check "det with that token is refused" eval "! KDET_API_TOKEN=$BOB '$DET' model describe mnist >/dev/null 2>'$T/err'"
check "nothing of bob's changed mnist" eval "'$DET' model describe mnist --json | jq -e '.versions | length == 3' >/dev/null"

# GC: release the held trial; at the end the policy keeps only each trial's best (reg-1-20), and the
# versions keep reg-1-10 and reg-1-30.
touch "$T/release"
check "experiment COMPLETED" wait_for 60 exp_state_is reg COMPLETED
check "GC ran at the end" wait_for 20 eval "grep -q 'msg=\"checkpoint GC\" experiment=reg checkpoints=4' '$T/ctrl.log'"
check "the registered checkpoints survived GC" test "$(state_of reg-1-10) $(state_of reg-1-30) $(state_of reg-2-30)" = "ACTIVE ACTIVE DELETED"
check "their files too" eval "on_disk reg-1-10 && on_disk reg-1-30 && ! on_disk reg-2-30"
check "the API lists them as protected" eval "[ \"\$(api GET experiments/reg/checkpoints)\" = 200 ] &&
    [ \"\$(jq -r '[.checkpoints[] | select(.protected) | .uuid] | sort | join(\" \")' '$T/body')\" = \"\$(printf '%s\n' $U10 $U20 $U30 | sort | tr '\n' ' ' | sed 's/ \$//')\" ]"
check "det model delete-version" eval "'$DET' model delete-version mnist 1 --yes >'$T/out' && grep -q 'version 1 of model mnist deleted' '$T/out'"
check "its checkpoint is collected by the next GC pass" wait_for 30 eval '[ "$(state_of reg-1-10)" = DELETED ]'
check "and its files removed" eval "! on_disk reg-1-10"
check "the one a version still holds stays" test "$(state_of reg-1-30)" = ACTIVE
check "delete without --yes and no terminal is refused" eval "! '$DET' model delete mnist </dev/null 2>'$T/err' && grep -q 'pass --yes' '$T/err'"
check "det model delete" eval "'$DET' model delete mnist --yes >/dev/null"
check "the model's checkpoint beyond the policy is collected" wait_for 30 eval '[ "$(state_of reg-1-30)" = DELETED ]'
check "the policy's own keeps its checkpoint" test "$(state_of reg-1-20)" = ACTIVE
check "the model is gone (exit 5)" eval "'$DET' model describe mnist >/dev/null 2>&1; [ \$? = 5 ]"
check "no model or version rows left" test "$(psqlq 'select count(*) from model_versions') $(psqlq 'select count(*) from models')" = "0 0"
