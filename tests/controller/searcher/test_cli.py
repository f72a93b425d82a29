"""kdet-search end to end: ask/tell over pipes, snapshot + --restore, errors and exit codes."""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name + (": " + detail if detail else ""))


class Search:
    def __init__(self, args):
        self.p = subprocess.Popen([BIN] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.line = 0
        self.ops, self.ack = self.read()

    def read(self):
        ops = []
        while True:
            l = self.p.stdout.readline()
            if not l:
                raise RuntimeError("kdet-search exited: " + self.p.stderr.read())
            o = json.loads(l)
            if "ack" in o or "error" in o:
                return ops, o
            ops.append(o)

    def send(self, ev):
        self.p.stdin.write(json.dumps(ev) + "\n")
        self.p.stdin.flush()
        self.line += 1
        return self.read()

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=30)
        err = self.p.stderr.read()
        self.p.stdout.close()
        self.p.stderr.close()
        return rc, err


def branin(x, y):
    import math
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def drive(s, queue, limit=None, log=None):
    """Answer ops like a controller, one at a time; returns when queue is empty or limit hit."""
    n = 0
    while queue and (limit is None or n < limit):
        op = queue.pop(0)
        if op["op"] == "create":
            ev = {"event": "trial_created", "request_id": op["request_id"]}
            hp[op["request_id"]] = op["hparams"]
        elif op["op"] == "validate_after":
            h = hp[op["request_id"]]
            ev = {"event": "validation_completed", "request_id": op["request_id"],
                  "metric": branin(h["x"], h["y"]), "length": op["length"]}
        elif op["op"] == "close":
            ev = {"event": "trial_closed", "request_id": op["request_id"]}
        else:
            continue
        ops, ack = s.send(ev)
        if log is not None:
            log.append((ev, ops))
        queue.extend(ops)
        n += 1
    return n


tmp = tempfile.mkdtemp(prefix="kd-search-cli-")
cfg = {"hyperparameters": {"x": {"type": "double", "minval": -5, "maxval": 10},
                           "y": {"type": "double", "minval": 0, "maxval": 15}},
       "searcher": {"name": "bayesian", "metric": "loss", "max_trials": 16,
                    "max_concurrent_trials": 2, "max_length": {"batches": 10}}}
cfg_path = os.path.join(tmp, "exp.json")
with open(cfg_path, "w") as f:
    json.dump(cfg, f)

# 1. a whole search over pipes
hp = {}
s = Search([cfg_path, "--seed", "42"])
check("initial ops then ack 0", s.ack == {"ack": 0, "progress": 0.0, "done": False} and
      sum(o["op"] == "create" for o in s.ops) == 2, str(s.ack))
queue = list(s.ops)
log = []
drive(s, queue, log=log)
creates = sum(1 for ev, ops in log for o in ops if o["op"] == "create") + 2
shut = [o for ev, ops in log for o in ops if o["op"] == "shutdown"]
check("16 trials then shutdown", creates == 16 and len(shut) == 1 and not shut[0]["failure"],
      "creates=%d shutdown=%s" % (creates, shut))
ops, ack = s.send({"event": "progress"})
check("progress 1 when done", ack.get("progress") == 1.0 and ack.get("done") is True, str(ack))
rc, err = s.close()
check("exit 0", rc == 0, "rc=%d %s" % (rc, err))

# 2. snapshot half way, restore in a new process, both continue identically
hp = {}
a = Search([cfg_path, "--seed", "7"])
qa = list(a.ops)
drive(a, qa, limit=20)
snap_ops, ack = a.send({"event": "snapshot"})
snap = snap_ops[0]["snapshot"]
snap_path = os.path.join(tmp, "snap.json")
with open(snap_path, "w") as f:
    json.dump(snap, f)
b = Search(["--restore", snap_path])
check("restore prints no ops", b.ops == [] and b.ack["ack"] == 0, str(b.ops))
same = True
steps = 0
while qa:
    op = qa.pop(0)
    if op["op"] == "create":
        hp[op["request_id"]] = op["hparams"]
        ev = {"event": "trial_created", "request_id": op["request_id"]}
    elif op["op"] == "validate_after":
        h = hp[op["request_id"]]
        ev = {"event": "validation_completed", "request_id": op["request_id"],
              "metric": branin(h["x"], h["y"]), "length": op["length"]}
    elif op["op"] == "close":
        ev = {"event": "trial_closed", "request_id": op["request_id"]}
    else:
        continue
    oa, _ = a.send(ev)
    ob, _ = b.send(ev)
    same = same and oa == ob
    steps += 1
    qa.extend(oa)
check("restored process makes the same decisions (%d events)" % steps, same and steps > 10)
a.close()
b.close()

# 3. bad input lines: an error naming the line, the state unchanged, exit status 1
s = Search([cfg_path])
ops, ack = s.send({"event": "validation_completed", "request_id": s.ops[0]["request_id"],
                   "metric": "high", "length": 1})
check("bad metric named", ack.get("line") == 1 and
      ack.get("error") == "validation_completed.metric: expected a number", str(ack))
s.p.stdin.write("{oops\n")
s.p.stdin.flush()
ops, ack = s.read()
check("bad JSON named", ack.get("line") == 2 and ack["error"].startswith("not JSON"), str(ack))
ops, ack = s.send({"event": "trial_closed", "request_id": "r99-00000000"})
check("unknown id named", "unknown request id \"r99-00000000\"" in ack.get("error", ""), str(ack))
ops, ack = s.send({"event": "trial_created", "request_id": s.ops[0]["request_id"]})
check("good line still works", ack.get("ack") == 4, str(ack))
rc, err = s.close()
check("exit 1 after rejected lines", rc == 1 and "line 2: not JSON" in err, "rc=%d" % rc)

# 4. bad configs and arguments: exit 2 with the path of the problem
def run(args):
    p = subprocess.run([BIN] + args, input="", capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr

bad = dict(cfg)
bad["searcher"] = {"name": "random", "metric": "loss", "max_length": {"batches": 1}}
bad_path = os.path.join(tmp, "bad.json")
with open(bad_path, "w") as f:
    json.dump(bad, f)
rc, err = run([bad_path])
check("bad config: exit 2 and field path", rc == 2 and
      "searcher.max_trials: required by the random searcher" in err, err)
rc, err = run([os.path.join(tmp, "missing.json")])
check("missing file: exit 2", rc == 2 and "missing.json" in err, err)
with open(os.path.join(tmp, "broken.json"), "w") as f:
    f.write('{"searcher": [}')
rc, err = run([os.path.join(tmp, "broken.json")])
check("broken JSON config: position", rc == 2 and "broken.json:1:" in err, err)
rc, err = run([cfg_path, "--seed", "-3"])
check("bad seed", rc == 2 and "--seed" in err, err)
rc, err = run([])
check("usage", rc == 2 and "usage:" in err, err)
rc, err = run(["--restore", bad_path])
check("restore of a non-snapshot", rc == 2 and "snapshot.format" in err, err)

# 5. the same seed gives the same operations; another seed does not
def first_ops(seed):
    s = Search([cfg_path, "--seed", str(seed)])
    ops = s.ops
    s.close()
    return ops

check("deterministic per seed", first_ops(5) == first_ops(5) and first_ops(5) != first_ops(6))

# 6. YAML experiment configs go through lib/config
yaml_path = os.path.join(tmp, "exp.yaml")
with open(yaml_path, "w") as f:
    f.write("name: cli\nentrypoint: model_def:Trial\nhyperparameters:\n"
            "  x: {type: int, minval: 1, maxval: 4}\nsearcher:\n  name: random\n"
            "  metric: loss\n  max_trials: ten\n  max_length: {batches: 10}\n")
rc, err = run([yaml_path])
check("YAML error with file position", rc == 2 and "exp.yaml:8:" in err and
      "searcher.max_trials" in err, err)
with open(yaml_path) as f:
    text = f.read().replace("max_trials: ten", "max_trials: 3")
with open(yaml_path, "w") as f:
    f.write(text)
s = Search([yaml_path])
check("YAML config runs", sum(o["op"] == "create" for o in s.ops) == 3 and
      all(1 <= o["hparams"]["x"] <= 4 for o in s.ops if o["op"] == "create"), str(s.ops))
s.close()

for f in os.listdir(tmp):
    os.unlink(os.path.join(tmp, f))
os.rmdir(tmp)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
