"""A minimal ask/tell client for kdet-search (JSON lines over pipes), used by the benchmarks."""
import json
import subprocess


class KdSearch:
    """One kdet-search process. ops: the operations printed at start."""

    def __init__(self, binary, config, seed):
        self.p = subprocess.Popen([binary, config, "--seed", str(seed)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  bufsize=1)
        self.ops, self.ack = self._read()

    def _read(self):
        ops = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("kdet-search exited early")
            o = json.loads(line)
            if "ack" in o:
                return ops, o
            if "error" in o:
                raise RuntimeError("kdet-search rejected an event: " + o["error"])
            ops.append(o)

    def send(self, event):
        self.p.stdin.write(json.dumps(event) + "\n")
        self.p.stdin.flush()
        ops, self.ack = self._read()
        return ops

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        self.p.stdout.close()


def run_search(binary, config, seed, objective, on_event=None):
    """Answer operations like a controller, in FIFO order, until the searcher shuts down.

    objective(hparams, length) -> metric. Returns the list of (request_id, hparams, length,
    metric) validations in order, and the total training length used (each trial counts the
    longest length it trained to).
    """
    s = KdSearch(binary, config, seed)
    queue = list(s.ops)
    hp, trained, vals = {}, {}, []
    while queue:
        op = queue.pop(0)
        kind = op["op"]
        if kind == "create":
            hp[op["request_id"]] = op["hparams"]
            ev = {"event": "trial_created", "request_id": op["request_id"]}
        elif kind == "validate_after":
            rid, n = op["request_id"], op["length"]
            m = objective(hp[rid], n)
            trained[rid] = max(trained.get(rid, 0), n)
            vals.append((rid, hp[rid], n, m))
            ev = {"event": "validation_completed", "request_id": rid, "metric": m, "length": n}
        elif kind == "close":
            ev = {"event": "trial_closed", "request_id": op["request_id"]}
        else:
            continue
        if on_event:
            on_event(ev)
        queue.extend(s.send(ev))
    s.close()
    return vals, sum(trained.values())


def run_concurrent(binary, config, seed, objective):
    """Answer like a controller whose trials all take the same time: every Create is started at
    once, and only the oldest running trial reports (its validation, then trial_closed) before
    the searcher proposes its replacement. With max_concurrent_trials C, every proposal after the
    first C is made while C - 1 earlier trials have not reported.

    objective(hparams, length) -> metric. Returns the metrics in the order the trials reported.
    """
    s = KdSearch(binary, config, seed)
    queue = list(s.ops)
    hp, running, order = {}, [], []
    while True:
        while queue:
            op = queue.pop(0)
            rid = op.get("request_id")
            if op["op"] == "create":
                hp[rid] = op["hparams"]
                queue.extend(s.send({"event": "trial_created", "request_id": rid}))
            elif op["op"] == "validate_after":
                running.append((rid, op["length"]))
            elif op["op"] == "close":
                queue.extend(s.send({"event": "trial_closed", "request_id": rid}))
        if not running:
            break
        rid, n = running.pop(0)
        m = objective(hp[rid], n)
        order.append(m)
        queue.extend(s.send({"event": "validation_completed", "request_id": rid, "metric": m,
                             "length": n}))
    s.close()
    return order
