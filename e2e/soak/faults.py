"""The soak test's fault scheduler: faults at random moments, overlapping (up
to `overlap` at once, never two on the same target), each bounded in time,
all bounded in count, on 127.0.0.1 only.

| kind | what |
|---|---|
| kill_ctrl | kill -9 of one controller replica (the leader or the standby) |
| kill_ctrl_both | kill -9 of both replicas |
| kill_pg | kill -9 of PostgreSQL's postmaster and backends |
| kill_local | kill -9 of kdet-local (API server and node soak-n0) |
| kill_agent | kill -9 of the node agent (node soak-n1) |
| kill_worker | kill -9 of one training process |
| kill_launch | kill -9 of one kdet-launch |
| net_api | workers <-> controller API: delay, drop, reset or black hole |
| net_pg | controller <-> PostgreSQL: delay, drop, reset or black hole |
| disk_ckpt | the checkpoint file system full |
| disk_pg | PostgreSQL's file system full |
| clock_validation | a trial's latestValidation.time an hour off, as written by an API replica whose clock jumped |
| clock_lease | the leader Lease's renewTime an hour in the past, as written by a replica whose clock jumped |

Each fault: inject, hold for its duration, clear (the supervisor in
cluster.py restarts what was killed once the hold is released)."""
import errno
import glob
import os
import signal
import threading
import time

WEIGHTS = {
    "kill_ctrl": 4, "kill_ctrl_both": 1, "kill_pg": 3, "kill_local": 2, "kill_agent": 2,
    "kill_worker": 3, "kill_launch": 2, "net_api": 3, "net_pg": 3, "disk_ckpt": 1,
    "disk_pg": 1, "clock_validation": 2, "clock_lease": 1,
}
TARGETS = {
    "kill_ctrl": ["ctrl"], "kill_ctrl_both": ["ctrl"], "kill_pg": ["pg"],
    "kill_local": ["local"], "kill_agent": ["agent"], "kill_worker": ["pods"],
    "kill_launch": ["pods"], "net_api": ["api-proxy"], "net_pg": ["pg-proxy", "pg"],
    "disk_ckpt": ["ckpt-disk"], "disk_pg": ["pg"], "clock_validation": ["trials"],
    "clock_lease": ["ctrl"],
}
NEEDS_ROOT = {"disk_ckpt", "disk_pg"}


def ancestors(pid):
    out = []
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
        out.append(pid)
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


class Faults:
    def __init__(self, cl, rng, say, max_faults, overlap=2, mean_gap=12.0):
        self.cl, self.rng, self.say = cl, rng, say
        self.max_faults, self.overlap, self.mean_gap = max_faults, overlap, mean_gap
        self.busy = set()
        self.lock = threading.Lock()
        self.log = []  # {"kind", "detail", "t0", "t1"}
        self.active = 0
        self.stop_flag = False
        self.skipped = {}
        self.weights = dict(WEIGHTS)
        if not cl.rooted:
            for k in NEEDS_ROOT:
                self.weights.pop(k)
        self.threads = []
        self.half = time.time() + 1e9
        self.lease_checks = []  # (holder before, after) of each clock_lease

    # ---- targets ---------------------------------------------------------------------------
    def _pods_procs(self, want):
        """Pids of processes run by our kubelets whose command matches want(argv)."""
        roots = {d.pid for d in (self.cl.local, self.cl.agent) if d.up()}
        out = []
        for d in glob.glob("/proc/[0-9]*"):
            pid = int(d[6:])
            argv = cmdline(pid)
            if argv and want(argv) and roots & set(ancestors(pid)):
                out.append(pid)
        return out

    # ---- one fault -------------------------------------------------------------------------
    def _run(self, kind, targets):
        t0 = time.time()
        rec = {"kind": kind, "detail": "", "t0": t0, "t1": t0}
        try:
            rec["detail"] = getattr(self, "_f_" + kind)() or ""
        except Exception as e:  # noqa: a fault that could not be injected is recorded as such
            rec["detail"] = f"not injected: {e}"
            rec["failed"] = True
        rec["t1"] = time.time()
        with self.lock:
            self.log.append(rec)
            self.active -= 1
            self.busy -= set(targets)
        self.say(f"fault {kind} cleared after {rec['t1'] - t0:.1f}s: {rec['detail']}")

    def _hold(self, daemons, secs, kill=True):
        for d in daemons:
            with d.lock:
                d.hold += 1
            if kill:
                d.kill9()
        time.sleep(secs)
        for d in daemons:
            with d.lock:
                d.hold -= 1

    def _f_kill_ctrl(self):
        # One replica at a time is spared by this fault (b in the first half of the soak, a
        # in the second), so that some controller processes live long enough for the RSS and
        # fd trends; kill_ctrl_both still takes both down now and then.
        r = "a" if time.time() < self.half else "b"
        lead = self.leader()
        self._hold([self.cl.ctrl[r]], self.rng.uniform(0, 3))
        return f"replica {r}{' (leader)' if lead == r else ''}"

    def _f_kill_ctrl_both(self):
        self._hold(list(self.cl.ctrl.values()), self.rng.uniform(0.5, 4))
        return "replicas a and b"

    def _f_kill_pg(self):
        self._hold([self.cl.pg], self.rng.uniform(0.5, 4))
        return "postmaster and backends"

    def _f_kill_local(self):
        self._hold([self.cl.local], self.rng.uniform(0.3, 3))
        return "kdet-local"

    def _f_kill_agent(self):
        self._hold([self.cl.agent], self.rng.uniform(0.5, 5))
        return "node agent soak-n1"

    def _kill_one(self, want, what):
        pids = self._pods_procs(want)
        if not pids:
            return f"no {what} running"
        pid = self.rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as e:
            return f"{what} {pid}: {e}"
        return f"{what} pid {pid}"

    def _f_kill_worker(self):
        return self._kill_one(lambda a: os.path.basename(a[0]) == "fashion-mnist-c" or
                              any(x.endswith("torch_trial.py") for x in a[:2]), "worker")

    def _f_kill_launch(self):
        return self._kill_one(lambda a: os.path.basename(a[0]) == "kdet-launch", "kdet-launch")

    def _net(self, proxy):
        mode = self.rng.choice(["delay", "drop", "reset", "blackhole"])
        secs = self.rng.uniform(2, 12)
        delay = self.rng.choice([50, 200, 800]) if mode == "delay" else 0
        proxy.set_mode(mode, delay)
        time.sleep(secs)
        proxy.set_mode("pass")
        return f"{mode}{f' {delay}ms' if delay else ''} for {secs:.1f}s"

    def _f_net_api(self):
        return self._net(self.cl.api_proxy)

    def _f_net_pg(self):
        return self._net(self.cl.pg_proxy)

    def _fill(self, path, secs, hold=()):
        f = os.path.join(path, "soak-filler")
        n = 0
        for d in hold:
            with d.lock:
                d.hold += 1
        try:
            with open(f, "wb") as fh:
                chunk = b"\0" * (1 << 20)
                while True:
                    try:
                        fh.write(chunk)
                        fh.flush()
                        n += 1
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
            time.sleep(secs)
        finally:
            try:
                os.unlink(f)
            except OSError:
                pass
            for d in hold:
                with d.lock:
                    d.hold -= 1
        return f"{path} full ({n} MiB added) for {secs:.1f}s"

    def _f_disk_ckpt(self):
        return self._fill(self.cl.ckpt, self.rng.uniform(4, 15))

    def _f_disk_pg(self):
        # PostgreSQL may stop on a full disk (a PANIC on a WAL write): no restart while full.
        return self._fill(self.cl.pgfs, self.rng.uniform(4, 12), hold=[self.cl.pg])

    def _f_clock_validation(self):
        # Best on a trial that waits at its target for the searcher (ASHA's rungs, PBT's
        # rounds): the idle release counts its grace from that time.
        k = self.cl.kube
        cands = []
        for _ in range(20):
            items = k.items("/apis/kdet.io/v1alpha1/namespaces/default/trials")
            cands = [t for t in items if t.get("status", {}).get("state") == "ACTIVE" and
                     t.get("status", {}).get("latestValidation", {}).get("time")]
            at = [t for t in cands if not t.get("spec", {}).get("closed") and
                  t["status"]["latestValidation"].get("batches", -1) >=
                  t.get("spec", {}).get("validateAfter", 1 << 62)]
            if at:
                cands = at
                break
            time.sleep(0.5)
        if not cands:
            return "no ACTIVE trial with a validation"
        t = self.rng.choice(cands)
        skew = self.rng.choice([-3600, 3600])
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + skew))
        k.patch(f"/apis/kdet.io/v1alpha1/namespaces/default/trials/{t['metadata']['name']}/status",
                {"status": {"latestValidation": {"time": ts}}})
        return f"{t['metadata']['name']} latestValidation.time {skew:+d}s"

    def _holder(self):
        return self.cl.kube.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                                "kdet-controller").get("spec", {}).get("holderIdentity", "")

    def _f_clock_lease(self):
        # Leader election compares no wall clocks (lib/k8s/leader.c): the holder must stay.
        k = self.cl.kube
        before = self._holder()
        ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 3600))
        k.patch("/apis/coordination.k8s.io/v1/namespaces/default/leases/kdet-controller",
                {"spec": {"renewTime": ts}})
        time.sleep(self.rng.uniform(5, 10))
        after = self._holder()
        self.lease_checks.append((before, after))
        return f"Lease renewTime -3600s; holder {before} -> {after}"

    def leader(self):
        try:
            h = self.cl.kube.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                                 "kdet-controller").get("spec", {}).get("holderIdentity", "")
        except Exception:
            return "?"
        for r, d in self.cl.ctrl.items():
            if d.up() and h.endswith(f"-{d.pid}"):
                return r
        return "?"

    # ---- the scheduler ---------------------------------------------------------------------
    def start(self):
        self.th = threading.Thread(target=self._loop, daemon=True)
        self.th.start()

    def _loop(self):
        while not self.stop_flag:
            time.sleep(min(self.rng.expovariate(1.0 / self.mean_gap), 3 * self.mean_gap))
            if self.stop_flag:
                return
            with self.lock:
                if len(self.log) + self.active >= self.max_faults or self.active >= self.overlap:
                    continue
                kinds = [k for k in self.weights if not set(TARGETS[k]) & self.busy]
                if not kinds:
                    continue
                kind = self.rng.choices(kinds, [self.weights[k] for k in kinds])[0]
                targets = TARGETS[kind]
                self.busy |= set(targets)
                self.active += 1
            self.say(f"fault {kind} injected")
            th = threading.Thread(target=self._run, args=(kind, targets), daemon=True)
            th.start()
            self.threads.append(th)

    def stop(self):
        self.stop_flag = True
        for th in self.threads:
            th.join(60)

    def by_kind(self):
        out = {}
        for r in self.log:
            if not r.get("failed"):
                out[r["kind"]] = out.get(r["kind"], 0) + 1
        return out
