#!/usr/bin/python3
"""The soak test: a continuous mixed workload on a local kdet (kdet-local
with two nodes, a private PostgreSQL, two kdet-controller replicas with
leader election) while faults are injected at random, with the
invariants checked all along and at the end. docs/soak.md.

Environment: KD_SOAK_DURATION (90s, 5m, 30m; default 5m), KD_SOAK_SEED
(default: random, printed; the same random choices, not the same timing), KD_SOAK_MAX_FAULTS (default one per 10 s of
soak), KD_SOAK_BREAK=metric|checkpoint|searcher (break the store or the storage on
purpose before the final checks, to show the checks fail), KEEP_T=1 (keep
the temp dir). Prints progress every 30 s and ends with the report and
`N passed, N failed`."""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clmod  # noqa: E402
import faults as fmod  # noqa: E402
import invariants as invmod  # noqa: E402
import workload as wlmod  # noqa: E402

T0 = time.time()


def say(msg):
    el = time.time() - T0
    print(f"# {int(el) // 60:02d}:{int(el) % 60:02d} {msg}", flush=True)


def duration(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m|h)?", s.strip())
    if not m:
        raise SystemExit(f"KD_SOAK_DURATION={s!r}: expected e.g. 90s, 5m, 30m, 1h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))]


def interrupted(sig, frame):
    raise KeyboardInterrupt(f"signal {sig}")


def main():
    src = os.environ.get("KD_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                   "..", ".."))
    build = os.environ.get("KD_BUILD") or os.path.join(src, "build")
    dur = duration(os.environ.get("KD_SOAK_DURATION", "5m"))
    seed = int(os.environ.get("KD_SOAK_SEED") or random.SystemRandom().randrange(1 << 31))
    max_faults = int(os.environ.get("KD_SOAK_MAX_FAULTS") or max(4, int(dur / 10)))
    brk = os.environ.get("KD_SOAK_BREAK", "")
    rng = random.Random(seed)
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("SKIP: no Fashion-MNIST (dataset-fashion-mnist)")
        return 77
    if not [p for p in ("/usr/lib/postgresql",) if os.path.isdir(p)] and \
            not os.environ.get("KD_PG_BINDIR"):
        print("SKIP: no PostgreSQL server binaries")
        return 77
    say(f"soak: {dur:.0f}s, seed {seed} (KD_SOAK_SEED={seed} makes the same choices), "
        f"at most {max_faults} faults, 2 at once")
    if os.getuid() != 0:
        print("SKIP: full-disk faults (disk_ckpt, disk_pg) need root to mount a tmpfs; "
              "the other faults run", flush=True)
    # A timeout (tests/run sends SIGTERM) or ^C still stops every daemon and unmounts.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    T = tempfile.mkdtemp(prefix="kdet-soak.", dir="/tmp")
    cl = clmod.Cluster(T, build, src, say)
    failed_setup = []
    inv = None
    try:
        cl.start()
        say(f"cluster up: kdet-local :{cl.kport} (nodes soak-n0, soak-n1), PostgreSQL, "
            f"controllers a :{cl.ctrl_ports if hasattr(cl, 'ctrl_ports') else cl.api_ports['a']}"
            f" and b :{cl.api_ports['b']}, API proxy :{cl.api_proxy.port}, "
            f"PostgreSQL proxy :{cl.pg_proxy.port}")
        wl = wlmod.Workload(cl.kube, T, src, rng, say, max_live=3)
        fl = fmod.Faults(cl, rng, say, max_faults, overlap=2,
                         mean_gap=max(6.0, min(15.0, dur / max_faults)))
        inv = invmod.Invariants(cl, wl, fl, say, os.path.join(build, "bin", "kdet-search"))
        inv.start()
        # a first experiment of each kind, then the random mix
        for k in ("multipod", "asha", "torch"):
            wl.create(k)
        fl.half = time.time() + dur / 2
        fl.start()
        end = T0 + dur
        last_round = last_prog = time.time()
        while time.time() < end:
            wl.tick()
            now = time.time()
            if now - last_round >= 15:
                inv.round()
                last_round = now
            if now - last_prog >= 30:
                last_prog = now
                say(f"progress: {len(wl.exps)} experiments, {len(fl.log)} faults done "
                    f"({fl.active} active), {sum(inv.checks.values())} checks, "
                    f"{len(inv.violations)} violations, {len(inv.recoveries)} recoveries")
            time.sleep(2)
        say("soak time over: no more faults; letting the experiments finish")
        fl.stop()
        wl.unpause_all()
        cl.wait(cl.healthy, 120, "every daemon up")
        drain_end = time.time() + max(180, min(300, dur / 6))
        while time.time() < drain_end:
            live = wl.live()
            if live is not None and not live:
                break
            inv.round()
            time.sleep(5)
        live = wl.live() or []
        for x in live:
            wl.cancel(x["metadata"]["name"])
        if live:
            say(f"canceled {len(live)} experiment(s) still running after the drain: "
                f"{', '.join(x['metadata']['name'] for x in live)}")
            t = time.time() + 120
            while time.time() < t and wl.live():
                time.sleep(2)
        inv.stop_flag = True
        time.sleep(3)
        if brk == "metric":
            cl.pg.sql("insert into metrics (trial_id, kind, step, metrics, reported_at, "
                      "batch_key) select trial_id, kind, step, metrics, now(), batch_key || "
                      "'-again' from metrics where kind = 'validation' limit 1")
            say("KD_SOAK_BREAK=metric: one validation row stored a second time")
        elif brk == "checkpoint":
            rows = cl.pg.sql("select storage_path from checkpoints where state = 'ACTIVE' "
                             "limit 1")
            for (sp,) in rows:
                d = sp[len("file://"):]
                for fn in os.listdir(d):
                    if fn != "kdet-manifest.json":
                        with open(os.path.join(d, fn), "r+b") as f:
                            b = f.read(1)
                            f.seek(0)
                            f.write(bytes([b[0] ^ 0xFF]))
                        say(f"KD_SOAK_BREAK=checkpoint: one byte of {d}/{fn} flipped")
                        break
        elif brk == "searcher":
            with inv.lock:
                # a history whose last state is replayed from the one before it
                h = next((h for k, h in inv.cm_hist.items() if len(h) > 2 and h[-1]["trials"]
                          and len(h) - 1 not in inv.cm_breaks[k]), None)
                if h:
                    h[-1] = dict(h[-1], trials=[dict(t) for t in h[-1]["trials"]])
                    h[-1]["trials"][0]["seed"] = h[-1]["trials"][0].get("seed", 0) + 1
                    say("KD_SOAK_BREAK=searcher: one trial seed changed in a recorded state")
        inv.ckpt_ok.clear()
        inv.round()
        n_acked, n_stored = inv.final_metrics()
        inv.final_explained()
        n_replayed, n_stretches, n_trans, n_gaps, skipped = inv.final_replay()
        res = inv.final_resources()
        nsamples, gap = inv.final_sampling()
        for before, after in fl.lease_checks:
            inv.check("lease_kept", before == after and before != "",
                      f"a Lease renewTime an hour old moved the lease from {before!r} to "
                      f"{after!r} with no replica killed")
        for n in list(wl.exps):
            if not wl.exps[n]["deleted"]:
                try:
                    wl.kube.delete(f"{wlmod.EXP_PATH}/{n}")
                except Exception:
                    pass
        inv.final_nothing_left()
    except (Exception, KeyboardInterrupt) as e:
        import traceback
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        traceback.print_exc()
        failed_setup.append(f"soak stopped: {e!r}")
        fl = locals().get("fl")
        if fl:
            fl.stop_flag = True
        n_acked = n_stored = n_replayed = n_stretches = n_trans = n_gaps = nsamples = gap = 0
        skipped, res = [], []
    # ---- stop, and what was left -----------------------------------------------------------
    codes = {}
    try:
        codes = cl.stop()
    except Exception as e:
        failed_setup.append(f"stop: {e}")
    time.sleep(1)
    left = subprocess.run(["pgrep", "-af", T], stdout=subprocess.PIPE, text=True).stdout.strip()
    if left:
        failed_setup.append(f"processes left behind: {left.splitlines()[:3]}")
        for ln in left.splitlines():
            try:
                os.kill(int(ln.split()[0]), 9)
            except (OSError, ValueError):
                pass
    for r in ("ctrl-a", "ctrl-b"):
        if codes.get(r) not in (0, None):
            failed_setup.append(f"{r} did not stop cleanly on SIGTERM (status {codes.get(r)})")
    for lf in ("ctrl-a.log", "ctrl-b.log", "kdet-local.log", "agent.log"):
        p = os.path.join(T, lf)
        if os.path.exists(p) and re.search(r"Sanitizer|runtime error:|Segmentation|Aborted",
                                           open(p, errors="replace").read()):
            failed_setup.append(f"{lf}: a crash or sanitizer report")
    # ---- the report ------------------------------------------------------------------------
    print("\n== soak report")
    print(f"duration {dur:.0f}s (+ {time.time() - T0 - dur:.0f}s set-up, drain and checks), "
          f"seed {seed}")
    if inv is None:
        for f in failed_setup:
            print(f"FAIL - {f}")
        cl.unmount()
        shutil.rmtree(T, ignore_errors=True)
        print(f"0 passed, {len(failed_setup)} failed")
        return 1
    bk = fl.by_kind()
    print(f"faults injected: {sum(bk.values())} ({', '.join(f'{k} {v}' for k, v in sorted(bk.items()))})")
    nf = [r for r in fl.log if r.get("failed")]
    if nf:
        print(f"faults not injected: {len(nf)} ({'; '.join(r['kind'] + ': ' + r['detail'] for r in nf[:5])})")
    unexpected = [(d.name, c) for d in cl.daemons for _, c in d.exits]
    print(f"daemon exits besides the faults' kills: {len(unexpected)} "
          f"{sorted(set(unexpected))[:8] if unexpected else ''}")
    kinds = {}
    for e in wl.exps.values():
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    print(f"workload: {len(wl.exps)} experiments ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}); "
          f"actions: {', '.join(f'{k} {v}' for k, v in sorted(wl.actions.items()))}")
    print(f"metrics: {n_acked} acknowledged rows checked, {n_stored} stored rows checked; "
          f"searcher replays: {n_replayed} experiments ({n_stretches} stretches, {n_trans} "
          f"transitions; {n_gaps} across a watch gap not checked)"
          f"{'; not replayed: ' + ', '.join(skipped) if skipped else ''}")
    print(f"invariants checked: {sum(inv.checks.values())} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(inv.checks.items()))})")
    print(f"cluster samples (liveness, idle release, recovery): {nsamples}, largest gap "
          f"{gap:.0f}s")
    rec = [s for _, s in inv.recoveries if s is not None]
    nrec = [k for k, s in inv.recoveries if s is None]
    print(f"recovery (fault to every running trial progressing again): p50 {pct(rec, 50):.1f}s, "
          f"p99 {pct(rec, 99):.1f}s, max {max(rec) if rec else float('nan'):.1f}s over "
          f"{len(rec)} faults; {len(nrec)} not within {invmod.RECOVERY_CAP_S}s {nrec[:6]}")
    for pid, life, r0, r1, f0, f1 in res:
        print(f"controller pid {pid} ({life:.0f}s): RSS {r0 / 1024:.1f} -> {r1 / 1024:.1f} MiB, "
              f"fds {f0} -> {f1}")
    print(f"violations: {len(inv.violations)}")
    for name, d in inv.violations[:40]:
        print(f"FAIL - {name}: {d}")
    for f in failed_setup:
        print(f"FAIL - {f}")
    failed = len(inv.violations) + len(failed_setup)
    passed = sum(inv.checks.values()) - len(inv.violations)
    if failed:
        for lf in ("ctrl-a.log", "ctrl-b.log"):
            p = os.path.join(T, lf)
            if os.path.exists(p):
                print(f"---- {lf} (warnings and errors, last 15)")
                ls = [x for x in open(p, errors="replace") if "level=warn" in x or
                      "level=error" in x]
                sys.stdout.write("".join(ls[-15:]))
    cl.unmount()
    if os.environ.get("KEEP_T"):
        print(f"# kept {T}")
    else:
        shutil.rmtree(T, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
