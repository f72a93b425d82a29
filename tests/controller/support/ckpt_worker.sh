# A shell worker for the checkpoint tests (tests/controller/gc, models): it
# follows the searcher through the controller API, and at a third, two
# thirds and all of each operation's length it uploads a checkpoint (a
# canonical UUID made from TRIAL-STEP, the name written to $OUTDIR/names)
# and reports a validation (loss: the hyperparameter lr, plus 0.5 at the
# first third and 0.05 at the end). `metrics-first` as $1 reports the
# validation before the checkpoint. HOLD=TRIAL waits for $OUTDIR/release
# after each operation. Run by sh in the trial's pod: DTRAIN, CKPT, OUTDIR
# and the KDET_* variables come from its environment.
H="Authorization: Bearer $KDET_TOKEN"
B="$KDET_CONTROLLER_URL/api/v1/namespaces/$KDET_NAMESPACE/trials/$KDET_TRIAL_ID"
lr=$(echo "$KDET_HPARAMS" | sed 's/.*"lr":\([0-9.]*\).*/\1/')
order=${1:-checkpoint-first}
done=0
ckpt() {
    curl -sf -H "$H" -X POST -d "{\"uuid\":\"$uuid\",\"batches\":$step,\"storage_path\":\"$CKPT/$uuid\",\"size\":16}" \
        "$B/checkpoints" >/dev/null
}
validation() {
    curl -sf -H "$H" -X POST -d "{\"kind\":\"validation\",\"key\":\"v-$step\",\"rows\":[{\"batches\":$step,\"metrics\":{\"loss\":$loss}}]}" \
        "$B/metrics" >/dev/null
}
while :; do
    op=$(curl -sf -H "$H" "$B/searcher/operation?completed=$done&timeout=10") || exit 1
    case "$op" in
    *'"stop"'*) exit 0 ;;
    *validate_after*) ;;
    *) continue ;;
    esac
    len=$(echo "$op" | sed 's/.*"length": *\([0-9]*\).*/\1/')
    for step in $((len / 3)) $((2 * len / 3)) $len; do
        case $step in
        $((len / 3))) loss=$(awk "BEGIN { print $lr + 0.5 }") ;;
        "$len") loss=$(awk "BEGIN { print $lr + 0.05 }") ;;
        *) loss=$lr ;;
        esac
        # A canonical UUID made from the name TRIAL-STEP (the API takes no other ids).
        name=$KDET_TRIAL_ID-$step
        uuid=$(printf %s "$name" | md5sum | sed 's/^\(.\{8\}\)\(.\{4\}\).\(.\{3\}\).\(.\{3\}\)\(.\{12\}\).*/\1-\2-4\3-8\4-\5/')
        echo "$uuid $name" >>"$OUTDIR/names"
        mkdir -p "$OUTDIR/w/$uuid" && echo "$KDET_TRIAL_ID $step" >"$OUTDIR/w/$uuid/model.bin"
        "$DTRAIN" ckpt upload "$OUTDIR/w/$uuid" --uuid "$uuid" --quiet >/dev/null 2>&1 || [ -f "$CKPT/$uuid/kdet-manifest.json" ] || exit 1
        if [ "$order" = metrics-first ]; then
            validation || exit 1
            ckpt || exit 1
        else
            ckpt || exit 1
            validation || exit 1
        fi
    done
    [ "${HOLD:-}" = "$KDET_TRIAL_ID" ] && while [ ! -f "$OUTDIR/release" ]; do sleep 0.2; done
    done=$len
done
