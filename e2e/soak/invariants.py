"""The soak test's invariants, checked while it runs and at the end:

- metrics: every row a worker had acknowledged is stored, none twice from
  one attempt, none that no worker handed over, values equal;
- trials: no trial created twice (store rows, Trial objects, a name with
  two uids);
- orphans: no pod, Secret, ConfigMap or Service whose owner is gone (after
  the garbage collector's grace), no live pod of an ended trial;
- checkpoints: every checkpoint the store calls ACTIVE is in storage with
  its manifest, every file's size and SHA-256 as listed;
- explained ends: each experiment ends in a state that follows from what
  was done to it, the same in the store as on the resource;
- searcher replay: every persisted searcher state equals what kdet-search
  computes from the previous one and the events the controller fed in
  between (derived from the two states), so a controller killed anywhere
  decided what an undisturbed one would have;
- liveness: no trial ACTIVE (not idle, not paused) for 240 s without a new
  metric row; recovery time per fault (fault to every trial that was
  running progressing again);
- resources: the controllers' RSS and open fds stay flat (/proc)."""
import base64
import collections
import gzip
import hashlib
import json
import os
import re
import subprocess
import threading
import time

import kube as kubemod

NS = "/api/v1/namespaces/default"
KD = "/apis/kdet.io/v1alpha1/namespaces/default"
TERMINAL = ("COMPLETED", "CANCELED", "ERROR")
EXIT_REASONS = ["errored", "user_canceled", "invalid_hp"]
WORST = 1.79769313486231570e+308
STALL_S = 240
RECOVERY_CAP_S = 300
IDLE_SLACK_S = 60


class Invariants:
    def __init__(self, cl, wl, faults, say, kdet_search):
        self.cl, self.wl, self.faults, self.say = cl, wl, faults, say
        self.kube = cl.kube
        self.kdet_search = kdet_search
        self.checks = collections.Counter()
        self.violations = []  # (invariant, detail)
        self.vseen = set()
        self.lock = threading.Lock()
        self.stop_flag = False
        # searcher states: configmap name -> [state dicts]; the indices in a history whose
        # state may not follow the one before (a watch gap: versions may have been missed);
        # names whose next new state comes after a gap
        self.cm_hist = collections.defaultdict(list)
        self.cm_breaks = collections.defaultdict(set)
        self.cm_gap = set()
        # trials: name -> {"uids": set, "exp": str}; uid -> last progress (time) and metric id
        self.trial_uids = collections.defaultdict(set)
        self.uid_name = {}
        self.progress_t = {}
        self.last_id = 0
        self.active_since = {}
        self.stalled = set()
        self.samples = []  # (t, set of running uids)
        self.pending = []  # fault records waiting for their recovery
        self.recoveries = []  # (kind, seconds or None)
        self.resolved = set()
        self.res = collections.defaultdict(list)  # controller pid -> [(t, rss_kb, fds)]
        self.orphan_seen = {}
        self.ckpt_ok = set()
        self.ckpt_missing = {}
        self.ran = set()
        self.at_target = {}
        self.sample_times = []

    # ---- bookkeeping -----------------------------------------------------------------------
    def check(self, name, ok, detail=""):
        with self.lock:
            self.checks[name] += 1
            if not ok:
                key = (name, detail)
                if key not in self.vseen:
                    self.vseen.add(key)
                    self.violations.append(key)
                    self.say(f"VIOLATION {name}: {detail}")
        return ok

    # ---- threads ---------------------------------------------------------------------------
    def start(self):
        for f in (self._watch_cms, self._sampler):
            threading.Thread(target=f, daemon=True).start()

    def _watch_cms(self):
        rv = None
        path = f"{NS}/configmaps"
        while not self.stop_flag:
            try:
                if rv is None:
                    lst = self.kube.get(path)
                    rv = lst["metadata"]["resourceVersion"]
                    for o in lst.get("items", []):
                        self._on_cm("ADDED", o, relist=True)
                rv = self.kube.watch(path, rv, self._on_cm, lambda: self.stop_flag)
            except kubemod.ApiError as e:
                if e.status in (410, 500) and "too old" in str(e.body) or e.status == 410:
                    self.say("searcher watch: resourceVersion too old; relisting (gap)")
                    with self.lock:
                        self.cm_gap |= set(self.cm_hist)  # the next state of each starts anew
                    rv = None
                time.sleep(0.5)
            except Exception:
                time.sleep(0.5)

    def _on_cm(self, typ, o, relist=False):
        name = o.get("metadata", {}).get("name", "")
        if not name.endswith("-searcher") or typ == "DELETED":
            return
        try:
            gz = (o.get("binaryData") or {}).get("state.json.gz")
            if gz is not None and "state.json" not in (o.get("data") or {}):
                st = json.loads(gzip.decompress(base64.b64decode(gz)))  # a large state
            else:
                st = json.loads((o.get("data") or {}).get("state.json", ""))
        except (ValueError, OSError, EOFError):
            return
        with self.lock:
            h = self.cm_hist[name]
            if h and h[-1] == st:
                self.cm_gap.discard(name)  # nothing was missed: the states only move forward
                return
            if h and (relist or name in self.cm_gap):
                self.cm_breaks[name].add(len(h))  # a relist may skip versions
            self.cm_gap.discard(name)
            h.append(st)

    def _sampler(self):
        last_res = 0
        while not self.stop_flag:
            t = time.time()
            try:
                self._sample(t)
                self.sample_times.append(t)
            except Exception as e:  # the API server or the database is down: next time
                self.last_err = str(e)
            if t - last_res >= 5:
                last_res = t
                self._sample_res(t)
            time.sleep(3)

    def _sample_res(self, t):
        for d in self.cl.ctrl.values():
            pid = d.pid
            if not d.up():
                continue
            try:
                with open(f"/proc/{pid}/status") as f:
                    rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, AttributeError):
                continue
            self.res[pid].append((t, rss, fds))

    def _sample(self, t):
        trials = self.kube.items(f"{KD}/trials")
        for tr in trials:  # first: the database may be down below
            self.trial_uids[tr["metadata"]["name"]].add(tr["metadata"]["uid"])
            self.uid_name[tr["metadata"]["uid"]] = tr["metadata"]["name"]
        exps = {x["metadata"]["name"]: x for x in self.kube.items(f"{KD}/experiments")}
        rows = self.cl.pg.sql(f"select t.uid, max(m.id) from metrics m join trials t on "
                              f"t.id = m.trial_id where m.id > {self.last_id} group by t.uid")
        for uid, mid in rows:
            self.progress_t[uid] = t
            self.last_id = max(self.last_id, int(mid))
        running = set()
        for tr in trials:
            md, st = tr["metadata"], tr.get("status", {})
            name, uid = md["name"], md["uid"]
            self.trial_uids[name].add(uid)
            self.uid_name[uid] = name
            ex = exps.get(md.get("labels", {}).get("kdet.io/experiment", ""), {})
            if st.get("state") == "ACTIVE" or st.get("latestValidation"):
                self.ran.add(md.get("labels", {}).get("kdet.io/experiment", ""))
            self._idle_check(t, tr, ex)
            if self._runs(tr, ex):
                running.add(uid)
                self.active_since.setdefault(uid, t)
                since = max(self.active_since[uid], self.progress_t.get(uid, 0))
                if t - since > STALL_S and uid not in self.stalled:
                    self.stalled.add(uid)
                    self.check("liveness", False,
                               f"trial {name} ACTIVE for {t - since:.0f}s without a new metric "
                               f"row ({st.get('message', '')[:160]})")
                elif t - since <= STALL_S:
                    self.stalled.discard(uid)
            else:
                self.active_since.pop(uid, None)
        with self.lock:
            self.samples.append((t, running, {tr["metadata"]["uid"] for tr in trials}))
            if len(self.samples) > 400:
                self.samples = self.samples[-400:]
        self.checks["liveness"] += 1
        self._recoveries(t, running)

    def _idle_check(self, t, tr, ex):
        """A trial waiting at its target for the searcher releases its pods (Idle) after
        --idle-release-after (3 s here): docs/controller.md, "Idle trials"."""
        st, sp = tr.get("status", {}), tr.get("spec", {})
        uid = tr["metadata"]["uid"]
        lv = (st.get("latestValidation") or {}).get("batches", -1)
        waiting = (self._runs(tr, ex) and not sp.get("closed") and
                   lv >= sp.get("validateAfter", 1 << 62) and st.get("pods"))
        if not waiting:
            self.at_target.pop(uid, None)
            return
        first = self.at_target.setdefault(uid, t)
        self.checks["idle_release"] += 1
        if t - first > IDLE_SLACK_S:
            self.check("idle_release", False,
                       f"trial {tr['metadata']['name']} has waited at its target "
                       f"({lv} batches) with its pods for {t - first:.0f}s, not released "
                       f"(latestValidation.time {st.get('latestValidation', {}).get('time')})")

    @staticmethod
    def _runs(tr, ex):
        st = tr.get("status", {})
        if st.get("state") != "ACTIVE" or tr.get("spec", {}).get("paused"):
            return False
        if any(c.get("type") == "Idle" and c.get("status") == "True"
               for c in st.get("conditions", [])):
            return False
        es = ex.get("status", {}).get("state", "")
        return es == "ACTIVE" and not ex.get("spec", {}).get("paused") and \
            not ex.get("spec", {}).get("canceled")

    def _recoveries(self, t, running):
        for rec in list(self.faults.log):
            key = id(rec)
            if key in self.resolved or rec.get("failed"):
                continue
            if t < rec["t1"]:
                continue
            before = [s for s in self.samples if s[0] <= rec["t0"]]
            if not before:
                self.resolved.add(key)
                continue
            S = before[-1][1]
            healthy = self.cl.healthy()
            ok = healthy and all(u not in running or self.progress_t.get(u, 0) > rec["t1"]
                                 for u in S)
            if ok:
                self.resolved.add(key)
                self.recoveries.append((rec["kind"], t - rec["t0"]))
            elif t - rec["t0"] > RECOVERY_CAP_S:
                self.resolved.add(key)
                self.recoveries.append((rec["kind"], None))

    # ---- periodic checks -------------------------------------------------------------------
    def round(self):
        """The checks that run every few seconds while the soak goes on."""
        for f in (self.check_metric_dups, self.check_trials_once, self.check_orphans,
                  self.check_checkpoints):
            try:
                f()
            except Exception as e:  # a daemon is down; the next round checks again
                self.last_err = f"{f.__name__}: {e}"

    def check_metric_dups(self):
        rows = self.cl.pg.sql(
            "select m.trial_id, split_part(m.batch_key, '-r', 1), m.kind, m.step, count(*) "
            "from metrics m group by 1, 2, 3, 4 having count(*) > 1")
        handed = None
        for tid, run, kind, step, n in rows:
            if handed is None:
                handed = {(r["tid"], k[1]): dict(r, name=k[0])
                          for k, r in self.worker_reports().items()}
            name = handed.get((tid, run), {}).get("name", f"trial id {tid}")
            h = handed.get((tid, run), {}).get("handed", collections.Counter())
            self.check("metrics_once", int(n) <= h[(kind, int(step))],
                       f"{name} run {run}: {kind} step {step} stored {n} times, handed over "
                       f"{h[(kind, int(step))]}")
        self.check("metrics_once", True)

    def check_trials_once(self):
        rows = self.cl.pg.sql("select e.name, t.request_id, count(*) from trials t join "
                              "experiments e on e.id = t.experiment_id group by 1, 2 "
                              "having count(*) > 1")
        for e, rid, n in rows:
            self.check("trials_once", False, f"{e}: request {rid} has {n} trial rows")
        items = self.kube.items(f"{KD}/trials")
        seen = collections.Counter((t["metadata"].get("labels", {}).get("kdet.io/experiment"),
                                    t.get("spec", {}).get("requestId")) for t in items)
        for (e, rid), n in seen.items():
            self.check("trials_once", n == 1, f"{e}: request {rid} has {n} Trial objects")
        for name, uids in self.trial_uids.items():
            self.check("trials_once", len(uids) == 1,
                       f"Trial {name} created {len(uids)} times (uids {sorted(uids)})")

    def check_orphans(self, grace=60):
        t = time.time()
        trials = self.kube.items(f"{KD}/trials")
        exps = self.kube.items(f"{KD}/experiments")
        owners = {o["metadata"]["uid"] for o in trials + exps}
        ended = {o["metadata"]["uid"] for o in trials
                 if o.get("status", {}).get("state") in TERMINAL}
        objs = []
        for kind, path in (("pod", f"{NS}/pods"), ("secret", f"{NS}/secrets"),
                           ("configmap", f"{NS}/configmaps"), ("service", f"{NS}/services")):
            for o in self.kube.items(path):
                objs.append((kind, o))
        now_bad = set()
        for kind, o in objs:
            md = o["metadata"]
            refs = md.get("ownerReferences") or []
            labelled = any(k.startswith("kdet.io/") for k in (md.get("labels") or {}))
            if not refs and not labelled:
                continue
            key = (kind, md["name"], md["uid"])
            why = None
            if refs and not any(r.get("uid") in owners for r in refs):
                why = f"owner {refs[0].get('kind')}/{refs[0].get('name')} is gone"
            elif not refs:
                why = "kdet labels and no owner"
            elif kind == "pod" and any(r.get("uid") in ended for r in refs) and \
                    o.get("status", {}).get("phase") in ("Pending", "Running") and \
                    not md.get("deletionTimestamp"):
                why = "its trial has ended but the pod runs on"
            if why is None:
                continue
            now_bad.add(key)
            first = self.orphan_seen.setdefault(key, t)
            if t - first > grace:
                self.check("no_orphans", False, f"{kind} {md['name']}: {why} "
                                                f"(for {t - first:.0f}s)")
        for key in list(self.orphan_seen):
            if key not in now_bad:
                del self.orphan_seen[key]
        self.check("no_orphans", True)

    def check_checkpoints(self, grace=30):
        rows = self.cl.pg.sql("select uuid, storage_path from checkpoints where state = 'ACTIVE'")
        t = time.time()
        for uuid, sp in rows:
            if uuid in self.ckpt_ok:
                continue
            why = verify_checkpoint(uuid, sp)
            if why is None:
                self.ckpt_ok.add(uuid)
                self.ckpt_missing.pop(uuid, None)
                self.check("checkpoints", True)
                continue
            first = self.ckpt_missing.setdefault(uuid, t)
            if t - first > grace:
                # still ACTIVE? (GC deletes the files first, then marks the row)
                st = self.cl.pg.sql(f"select state from checkpoints where uuid = '{uuid}'")
                if st and st[0][0] == "ACTIVE":
                    self.check("checkpoints", False, f"checkpoint {uuid} ({sp}): {why}")
                else:
                    self.ckpt_missing.pop(uuid, None)

    # ---- worker logs -----------------------------------------------------------------------
    def worker_reports(self):
        """(trial, run id) -> {"handed": Counter((kind, step)), "values": {(kind, step):
        [metrics]}, "acked": set((kind, step))}, from OUT/<trial>.<run>.<rank>.log."""
        out = {}
        d = os.path.join(self.cl.T, "out")
        for fn in os.listdir(d):
            m = re.match(r"^(.*)\.([0-9a-f]+)\.(\d+)\.log$", fn)
            if not m:
                continue
            rec = out.setdefault((m.group(1), m.group(2)), {
                "handed": collections.Counter(), "values": collections.defaultdict(list),
                "acked": set(), "tid": None})
            pending = []
            with open(os.path.join(d, fn), errors="replace") as f:
                for ln in f:
                    if ln.startswith("trial-int-id ") and ln.split()[1:]:
                        rec["tid"] = ln.split()[1]
                        continue
                    r = re.match(r"^report (\w+) batches=(\d+) (\{.*\})$", ln.rstrip("\n"))
                    if r:
                        k = (r.group(1), int(r.group(2)))
                        rec["handed"][k] += 1
                        try:
                            rec["values"][k].append(json.loads(r.group(3)))
                        except ValueError:
                            pass
                        pending.append(k)
                    elif ln.startswith("acked validation "):
                        rec["acked"].update(pending)
                        pending = []
        return out

    # ---- final checks ----------------------------------------------------------------------
    def final_metrics(self):
        # keyed by (the store's trial id, run id): the workers' logs name both
        reports = {}
        for (name, run), r in self.worker_reports().items():
            reports[(r["tid"], run)] = dict(r, name=name)
        rows = self.cl.pg.sql(
            "select m.trial_id, split_part(m.batch_key, '-r', 1), m.kind, m.step, "
            "m.metrics::text from metrics m where m.kind <> 'profiling'")
        stored = collections.defaultdict(lambda: collections.defaultdict(list))
        for tid, run, kind, step, js in rows:
            stored[(tid, run)][(kind, int(step))].append(json.loads(js))
        # The store's row of each trial id is the Trial the worker ran for (its uid).
        uids = {r[0]: r[1] for r in self.cl.pg.sql("select id, uid from trials")}
        for (tid, run), rec in reports.items():
            seen = self.trial_uids.get(rec["name"])
            if seen and tid in uids:
                self.check("trials_once", uids[tid] in seen,
                           f"{rec['name']}: store trial id {tid} has uid {uids[tid]}, the "
                           f"Trial's is {sorted(seen)}")
        n_acked = 0
        for key, rec in reports.items():
            st = stored.get(key, {})
            for k in rec["acked"]:
                n_acked += 1
                self.check("metrics_stored", k in st,
                           f"{rec['name']} (trial id {key[0]}) run {key[1]}: acknowledged "
                           f"{k[0]} at step {k[1]} is not stored")
        for key, st in stored.items():
            rec = reports.get(key)
            name = rec["name"] if rec else f"trial id {key[0]}"
            for k, vals in st.items():
                h = rec["handed"][k] if rec else 0
                self.check("metrics_once", len(vals) <= h,
                           f"{name} run {key[1]}: {k[0]} step {k[1]} stored {len(vals)} "
                           f"times, handed over {h}")
                if rec and h:
                    sent = rec["values"][k]
                    for v in vals:
                        self.check("metrics_values", any(close(v, s) for s in sent),
                                   f"{name} run {key[1]}: {k[0]} step {k[1]} stored {v}, "
                                   f"sent {sent}")
        return n_acked, sum(len(v) for st in stored.values() for v in st.values())

    def final_explained(self):
        """Each experiment's end follows from what was done to it."""
        exps = {x["metadata"]["name"]: x for x in self.kube.items(f"{KD}/experiments")}
        trials = self.kube.items(f"{KD}/trials")
        store = {r[0]: r[1] for r in self.cl.pg.sql("select name, state from experiments")}
        for name, e in self.wl.exps.items():
            acts = [a for _, a in e["actions"]]
            x = exps.get(name)
            if e["deleted"]:
                self.check("explained_end", x is None, f"{name}: deleted, but the resource is "
                                                       f"still there")
                self.check("explained_end", store.get(name) in ("DELETED",) + TERMINAL or
                           (store.get(name) is None and name not in self.ran),
                           f"{name}: deleted; store state {store.get(name)}")
                continue
            if x is None:
                self.check("explained_end", False, f"{name}: the resource is gone, never "
                                                   f"deleted")
                continue
            st = x.get("status", {})
            state, msg = st.get("state", ""), st.get("message", "")
            self.check("explained_end", state in TERMINAL, f"{name}: ends {state or 'unset'} "
                                                           f"({msg[:120]})")
            # The store has an experiment once its searcher started (its first decisions are
            # recorded then) or its first attempt was started (docs/store.md).
            self.check("explained_end", store.get(name) == state or
                       (store.get(name) is None and name not in self.ran),
                       f"{name}: resource {state}, store {store.get(name)}")
            if state == "CANCELED":
                self.check("explained_end", "cancel" in acts,
                           f"{name}: CANCELED but never canceled ({msg[:120]})")
            if state == "ERROR":
                self.check("explained_end", bool(msg), f"{name}: ERROR without a message")
            if state == "COMPLETED" and e.get("cancels"):
                # Terminal states are final: a cancel stored when the experiment had ended, or
                # while the controller was writing its end (endTime within a few seconds of
                # the cancel), leaves it COMPLETED. Later than that, the cancel was ignored.
                t_cancel, was = e["cancels"][0]
                end = parse_time(st.get("endTime", ""))
                self.check("explained_end", was == "COMPLETED" or
                           (end is not None and end <= t_cancel + 5),
                           f"{name}: canceled (it was {was or 'new'}) but COMPLETED "
                           f"{(end - t_cancel) if end else float('nan'):.0f}s later")
            mine = [t for t in trials
                    if t["metadata"].get("labels", {}).get("kdet.io/experiment") == name]
            for t in mine:
                ts = t.get("status", {})
                self.check("explained_end", ts.get("state") in TERMINAL,
                           f"{name}: trial {t['metadata']['name']} left {ts.get('state')}")
                if ts.get("state") == "ERROR":
                    self.check("explained_end", bool(ts.get("message")),
                               f"trial {t['metadata']['name']}: ERROR without a message")

    def final_replay(self):
        """Replay each experiment's searcher, one stretch of states without a watch gap at
        a time (each from the state it starts with): (experiments, stretches, transitions
        replayed, transitions across a gap left unchecked, skipped)."""
        n = nseg = ntrans = ngap = 0
        skipped = []
        with self.lock:
            hist = {k: list(v) for k, v in self.cm_hist.items()}
            breaks = {k: set(v) for k, v in self.cm_breaks.items()}
        for cm, h in sorted(hist.items()):
            segs = stretches(len(h), breaks.get(cm, set()))
            ngap += len(segs) - 1
            why, mine, trans = None, 0, 0
            for a, b in segs:
                if b - a < 2:
                    continue
                why = replay(self.kdet_search, h[a:b], self.cl.T)
                if why is not None:
                    why = why if why == "skip" else f"states {a}..{b - 1}: {why}"
                    break
                mine += 1
                trans += b - a - 1
            if why == "skip":
                skipped.append(f"{cm} (a non-finite metric)")
                continue
            if why is None and mine == 0:
                continue  # no two states in a row: nothing to replay
            n += 1
            nseg += mine
            ntrans += trans
            self.check("searcher_replay", why is None, f"{cm}: {why}")
        return n, nseg, ntrans, ngap, skipped

    def final_resources(self, min_life=150):
        out = []
        for pid, s in self.res.items():
            if len(s) < 6 or s[-1][0] - s[0][0] < min_life:
                continue
            s = [x for x in s if x[0] - s[0][0] >= 30]
            k = max(1, len(s) // 3)
            rss0 = sorted(x[1] for x in s[:k])[k // 2]
            rss1 = sorted(x[1] for x in s[-k:])[k // 2]
            fd0 = sorted(x[2] for x in s[:k])[k // 2]
            fd1 = sorted(x[2] for x in s[-k:])[k // 2]
            life = s[-1][0] - s[0][0] + 30
            out.append((pid, life, rss0, rss1, fd0, fd1))
            self.check("flat_rss", rss1 <= rss0 * 1.25 + 8192,
                       f"controller pid {pid}: RSS {rss0} -> {rss1} KiB over {life:.0f}s")
            self.check("flat_fds", fd1 <= fd0 + 32,
                       f"controller pid {pid}: {fd0} -> {fd1} open fds over {life:.0f}s")
        return out

    def final_sampling(self):
        """The liveness, idle and recovery checks saw the cluster often enough: no gap of
        more than 120 s between two complete samples (a daemon down for long is a gap)."""
        ts = self.sample_times
        gap = max((b - a for a, b in zip(ts, ts[1:])), default=0)
        self.check("sampling", len(ts) >= 2 and gap <= 120,
                   f"{len(ts)} samples of the cluster, largest gap {gap:.0f}s")
        return len(ts), gap

    def final_nothing_left(self, secs=90):
        """After every experiment was deleted: no kdet object left in the namespace."""
        end = time.time() + secs
        left = []
        while time.time() < end:
            left = []
            for kind, path in (("trial", f"{KD}/trials"), ("pod", f"{NS}/pods"),
                               ("secret", f"{NS}/secrets"), ("configmap", f"{NS}/configmaps"),
                               ("service", f"{NS}/services")):
                try:
                    for o in self.kube.items(path):
                        md = o["metadata"]
                        if md.get("ownerReferences") or any(
                                k.startswith("kdet.io/") for k in (md.get("labels") or {})):
                            left.append(f"{kind} {md['name']}")
                except Exception:
                    left.append(f"{kind} (list failed)")
            if not left:
                break
            time.sleep(1)
        self.check("no_orphans", not left, f"left after deleting every experiment: "
                                           f"{', '.join(left[:8])}")


def parse_time(ts):
    """Seconds since the epoch of an RFC 3339 UTC time, or None."""
    import calendar
    try:
        return calendar.timegm(time.strptime(ts.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def close(a, b):
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not (x == y or abs(x - y) <= 1e-12 * max(abs(x), abs(y))):
                return False
        elif x != y:
            return False
    return True


def verify_checkpoint(uuid, sp):
    """None when the checkpoint is complete and intact, else why not."""
    if not sp.startswith("file://"):
        return None  # only shared_fs in the soak
    d = sp[len("file://"):]
    if os.path.basename(d) != uuid:
        d = os.path.join(d, uuid)
    try:
        with open(os.path.join(d, "kdet-manifest.json")) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        return f"manifest: {e}"
    for fi in m.get("files", []):
        p = os.path.join(d, fi["path"])
        try:
            if os.path.getsize(p) != fi["size"]:
                return f"{fi['path']}: size {os.path.getsize(p)}, manifest {fi['size']}"
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            if h.hexdigest() != fi["sha256"]:
                return f"{fi['path']}: sha256 differs from the manifest"
        except OSError as e:
            return f"{fi['path']}: {e}"
    return None


def replay_events(prev, cur):
    """The events the controller fed between two persisted states, in its order
    (controller/experiment.c feed_events): per trial in table order, created,
    then a validation, then an early exit, then closed. None when one cannot be
    written as a kdet-search line (a non-finite metric)."""
    sib = True
    cfg = cur["snapshot"].get("config", {})
    if isinstance(cfg, dict):
        s = cfg.get("searcher", cfg)
        sib = s.get("smaller_is_better", True) is not False
    pt = {t["request_id"]: t for t in prev.get("trials", [])}
    ps = prev["snapshot"].get("trials", [])
    cs = cur["snapshot"].get("trials", [])
    evs = []
    for t in cur.get("trials", []):
        rid = t["request_id"]
        p = pt.get(rid, {})
        idx = int(re.match(r"r(\d+)-", rid).group(1))
        if t.get("created") and not p.get("created"):
            evs.append({"event": "trial_created", "request_id": rid})
        if t.get("validated", 0) > p.get("validated", 0):
            hist = [x for x in cs[idx]["hist"] if x[0] == t["validated"]]
            if not hist:
                return None
            loss = hist[-1][1]
            if isinstance(loss, str) or loss >= WORST:
                return None
            evs.append({"event": "validation_completed", "request_id": rid,
                        "metric": loss if sib else -loss, "length": t["validated"]})
        now_exited = cs[idx]["flags"] & 8 if idx < len(cs) else 0
        was_exited = ps[idx]["flags"] & 8 if idx < len(ps) else 0
        if t.get("ended") and not p.get("ended"):
            if now_exited and not was_exited:
                evs.append({"event": "trial_exited_early", "request_id": rid,
                            "reason": EXIT_REASONS[cs[idx].get("exit_reason", 0)]})
            evs.append({"event": "trial_closed", "request_id": rid})
    return evs


def stretches(n, breaks):
    """The [start, end) index ranges of a history of n states cut before each index in
    breaks: stretches([...5], {2, 4}) is [(0, 2), (2, 4), (4, 5)]."""
    cuts = [0] + sorted(b for b in breaks if 0 < b < n) + [n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _op_view(t):
    """What the searcher decided about one trial, as the state's table keeps it."""
    return {"hparams": t.get("hparams"), "seed": t.get("seed"), "parent": t.get("parent") or "",
            "validate_after": t.get("validate_after", 0), "closed": bool(t.get("closed"))}


def _apply_op(table, done, o):
    op, rid = o.get("op"), o.get("request_id")
    if op == "create":
        table[rid] = {"hparams": o.get("hparams"), "seed": o.get("seed"),
                      "parent": o.get("parent") or "", "validate_after": 0, "closed": False}
    elif op == "validate_after" and rid in table:
        table[rid]["validate_after"] = o.get("length")
    elif op == "close" and rid in table:
        table[rid]["closed"] = True
    elif op == "shutdown":
        done[0], done[1] = True, bool(o.get("failure"))


def replay(kdet_search, hist, T):
    """None when every state in hist follows from the one before; 'skip' when
    it cannot be replayed; else what differs."""
    snap = os.path.join(T, "replay-snapshot.json")
    with open(snap, "w") as f:
        json.dump(hist[0]["snapshot"], f)
    p = subprocess.Popen([kdet_search, "--restore", snap], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env={**os.environ, "KDET_LOG_LEVEL": "error"})
    table = {t["request_id"]: _op_view(t) for t in hist[0].get("trials", [])}
    done = [hist[0].get("done", False), hist[0].get("failure", False)]
    try:
        line = p.stdout.readline()  # the ack of the restore
        if '"ack"' not in line:
            return f"kdet-search --restore: {line.strip()[:200]}"
        for i in range(1, len(hist)):
            evs = replay_events(hist[i - 1], hist[i])
            if evs is None:
                return "skip"
            for ev in evs + [{"event": "snapshot"}]:
                p.stdin.write(json.dumps(ev) + "\n")
                p.stdin.flush()
                got = None
                while True:
                    ln = p.stdout.readline()
                    if not ln:
                        return f"kdet-search ended at state {i}"
                    o = json.loads(ln)
                    _apply_op(table, done, o)
                    if "snapshot" in o:
                        got = o["snapshot"]
                    if "ack" in o or "error" in o:
                        break
            want = {t["request_id"]: _op_view(t) for t in hist[i].get("trials", [])}
            if want != table:
                bad = sorted(r for r in set(want) | set(table) if want.get(r) != table.get(r))
                return (f"state {i} of {len(hist) - 1}: the controller's operations differ from "
                        f"the replay's for {bad[:3]}: {[want.get(r) for r in bad[:1]]} vs "
                        f"{[table.get(r) for r in bad[:1]]}")
            if [hist[i].get("done", False), hist[i].get("failure", False)] != done:
                return f"state {i}: done/failure {hist[i].get('done')}/" \
                       f"{hist[i].get('failure')}, the replay's {done}"
            if got != hist[i]["snapshot"]:
                return (f"state {i} of {len(hist) - 1}: the replayed searcher differs after "
                        f"{[e['event'] + ':' + e.get('request_id', '') for e in evs]}")
        return None
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
        p.wait(10)
