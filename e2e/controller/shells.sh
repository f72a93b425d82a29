#!/usr/bin/env bash
# Shells and TensorBoards on a kdet-local, a private PostgreSQL and the
# controller API. A shell runs Debian's sshd with the keys of its Secret:
# `det shell open ID -- hostname` runs through the controller's proxy
# (ssh's ProxyCommand is `det shell tunnel`, an upgraded connection)
# against the host key of the Secret, returns the command's exit code, and
# another namespace's user cannot open the tunnel. An experiment whose
# worker reports training and validation metrics gets TensorBoard event
# files next to its checkpoints (shared_fs); `det tensorboard start EXP`
# runs `tensorboard` over them; TensorBoard is not installable here, so a
# small HTTP server stands in for it as `tensorboard` on PATH and lists the
# event files it was given; it answers through the proxy and is ended by
# its idle_timeout once nobody uses it.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
if ! command -v ssh >/dev/null || ! { command -v sshd >/dev/null || [ -x /usr/sbin/sshd ]; }; then
    echo "SKIP: no ssh or sshd (Debian's openssh-client, openssh-server)"
    rm -rf "$T"
    exit 77
fi
trap 'stop_pg; finish; exit $?' EXIT
# The stand-in for TensorBoard: `tensorboard --logdir_spec N:D --port P ... --path_prefix X`,
# answering under X with the event files it finds under D.
mkdir -p "$T/bin"
cat >"$T/bin/tensorboard" <<'PY'
#!/usr/bin/python3
import http.server, os, sys
a = sys.argv[1:]
opt = lambda k: a[a.index(k) + 1]
spec, port, prefix = opt("--logdir_spec"), int(opt("--port")), opt("--path_prefix")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if not self.path.startswith(prefix):
            self.send_error(404)
            return
        files = []
        for part in spec.split(","):
            name, d = part.split(":", 1)
            for root, _, fs in os.walk(d):
                files += ["%s %s/%s" % (name, os.path.basename(root), f) for f in fs if "tfevents" in f]
        body = ("stand-in tensorboard\n" + "\n".join(sorted(files)) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
print("stand-in tensorboard on port %d for %s" % (port, spec), flush=True)
http.server.HTTPServer(("0.0.0.0", port), H).serve_forever()
PY
chmod +x "$T/bin/tensorboard"
start_pg || exit 1
export PATH=$T/bin:$PATH
start_local 1 || exit 1
start_ctrl_api
DET=$KD_BUILD/bin/det

# ---- a shell
printf 'resources: {slots: 0}\n' >"$T/sh.yaml"
"$DET" shell start -d --config-file "$T/sh.yaml" >"$T/sh.out" 2>&1
SH=$(head -1 "$T/sh.out")
echo "# shell: $SH"
check "the shell runs (sshd listening)" wait_for 30 task_state_is "$SH" RUNNING
check "its keys are in the Secret $SH-ssh, owned by the Task" test \
    "$(kubectl get secret "$SH-ssh" -o jsonpath='{.metadata.ownerReferences[0].name}')" = "$SH"
check "the Secret holds a client key, the host key and known_hosts" eval 'for k in id id\\.pub ssh_host_key authorized_keys known_hosts; do
    [ -n "$(kubectl get secret "$SH-ssh" -o jsonpath="{.data.$k}")" ] || exit 1; done'
timeout 60 "$DET" shell open "$SH" -- hostname >"$T/host.out" 2>"$T/host.err"
rc=$?
sed 's/^/#   /' "$T/host.out" "$T/host.err"
check "det shell open $SH -- hostname: exit 0" test "$rc" = 0
check "... printed this machine's host name (kdet-local runs pods here)" test "$(cat "$T/host.out")" = "$(hostname)"
check "it went through the proxy's tunnel" grep -q "msg=\"proxy tunnel opened\" task=default/$SH" "$T/ctrl.log"
timeout 60 "$DET" shell open "$SH" -- sh -c 'echo "in $PWD"; exit 3' >"$T/three.out" 2>&1
check "the command's exit code comes back (3)" test $? = 3
check "its output too" grep -q "^in " "$T/three.out"
# the host key is checked: a known_hosts of another key refuses the server
kubectl get secret "$SH-ssh" -o jsonpath='{.data.id}' | base64 -d >"$T/id" && chmod 600 "$T/id"
ssh-keygen -q -t ed25519 -N '' -f "$T/other" >/dev/null
printf '%s %s\n' "$SH" "$(cat "$T/other.pub")" >"$T/bad_known"
timeout 60 ssh -i "$T/id" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
    -o UserKnownHostsFile="$T/bad_known" -o HostKeyAlias="$SH" \
    -o ProxyCommand="$DET shell tunnel $SH" -l root "$SH" true >"$T/mitm.out" 2>&1
check "a wrong host key is refused by ssh" test $? != 0
# without a user token the tunnel is refused
env -u KDET_API_TOKEN KDET_DATA_DIR="$T/none" timeout 20 "$DET" shell tunnel "$SH" </dev/null >"$T/notoken.out" 2>&1
check "det shell tunnel without a token fails" test $? != 0
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Connection: Upgrade' -H 'Upgrade: kdet-tunnel' "$URL/proxy/$SH/")
check "the tunnel without a token: 401 ($code)" test "$code" = 401
"$DET" shell kill "$SH" >/dev/null 2>&1
check "killed: TERMINATED Killed" test "$(field task "$SH" '{.status.endReason}')" = Killed
check "no sshd left" wait_for 10 eval '! pgrep -f "kdet-sshd-.*" >/dev/null'

# ---- metrics as TensorBoard event files
cat >"$T/worker.sh" <<'W'
H="Authorization: Bearer $KDET_TOKEN"
B="$KDET_CONTROLLER_URL/api/v1/namespaces/$KDET_NAMESPACE/trials/$KDET_TRIAL_ID"
done=0
while :; do
    op=$(curl -sf -H "$H" "$B/searcher/operation?completed=$done&timeout=10") || exit 1
    case "$op" in *'"stop"'*) exit 0 ;; *validate_after*) ;; *) continue ;; esac
    len=$(echo "$op" | sed 's/.*"length": *\([0-9]*\).*/\1/')
    curl -sf -H "$H" -X POST -d "{\"kind\":\"training\",\"key\":\"$KDET_RUN_ID-t$len\",\"rows\":[{\"batches\":5,\"metrics\":{\"loss\":0.75}},{\"batches\":$len,\"metrics\":{\"loss\":0.5}}]}" "$B/metrics" >/dev/null || exit 1
    curl -sf -H "$H" -X POST -d "{\"kind\":\"validation\",\"key\":\"$KDET_RUN_ID-v$len\",\"rows\":[{\"batches\":$len,\"metrics\":{\"loss\":0.25,\"accuracy\":0.9}}]}" "$B/metrics" >/dev/null || exit 1
    done=$len
done
W
mkdir -p "$T/ckpt"
experiment tbexp "  entrypoint: sh $T/worker.sh
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 0}"
check "the experiment COMPLETED" wait_for 60 exp_state_is tbexp COMPLETED
UID_=$(field exp tbexp '{.metadata.uid}')
EV=$T/ckpt/tensorboard/$UID_/tbexp-1
ls -l "$EV" 2>/dev/null | sed 's/^/#   /'
check "event files next to its checkpoints: $EV" test "$(ls "$EV" 2>/dev/null | grep -c '^events\.out\.tfevents\.')" = 2
check "they hold the scalars' tags" eval 'cat "$EV"/events.out.tfevents.* | grep -aq "training/loss" && cat "$EV"/events.out.tfevents.* | grep -aq "validation/accuracy"'
check "and the event file version" eval 'cat "$EV"/events.out.tfevents.* | grep -aq "brain.Event:2"'

# ---- a TensorBoard over them
printf 'idle_timeout: 6s\n' >"$T/tb.yaml"
"$DET" tensorboard start tbexp --config-file "$T/tb.yaml" >"$T/tb.out" 2>"$T/tb.err"
rc=$?
TB=$(head -1 "$T/tb.out")
sed 's/^/#   /' "$T/tb.out" "$T/tb.err"
check "det tensorboard start: exit 0 and a link" eval '[ $rc = 0 ] && grep -q "^$URL/proxy/$TB/?namespace=default&kdet_ticket=" "$T/tb.out"'
check "its spec names the experiment" test "$(field task "$TB" '{.spec.experiments[0]}')" = tbexp
check "it asks for no slot" test "$(field task "$TB" '{.status.slots}')" = 0
curl -s -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/proxy/$TB/" >"$T/tb.html"
sed 's/^/#   /' "$T/tb.html"
check "through the proxy it lists the experiment's event files" eval 'grep -q "^tbexp tbexp-1/events.out.tfevents" "$T/tb.html" && [ "$(grep -c tfevents "$T/tb.html")" = 2 ]'
check "without a token: 401" test "$(curl -s -o /dev/null -w '%{http_code}' "$URL/proxy/$TB/")" = 401
check "unused for its idle_timeout, it ends (IdleTimeout)" wait_for 60 eval 'task_state_is "$TB" TERMINATED && [ "$(field task "$TB" "{.status.endReason}")" = IdleTimeout ]'
check "no task pod is left" wait_for 20 no_pods kdet.io/task
check "no stand-in left" eval '! pgrep -f "$T/bin/tensorboard" >/dev/null'
check "no key material in the controller log" eval '! grep -q "PRIVATE KEY" "$T/ctrl.log"'
