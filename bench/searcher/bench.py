"""kdet searcher benchmarks, side by side with Optuna 3.1 (Debian's python3-optuna).

1. quality: median regret after 50 and 100 evaluations over 20 seeds on Branin, Rosenbrock-4D
   and a mixed int + log + categorical space; our random and TPE vs Optuna's RandomSampler and
   TPESampler (defaults, ask/tell).
2. multi-fidelity: simulated learning curves; adaptive_asha vs random at equal total compute.
3. parallel: kdet TPE with 8 trials at once (each suggestion made while 7 earlier trials have
   not reported) against itself one at a time, median best over 10 seeds at 100 trials on
   Branin, next to Optuna's sequential TPE; the goal is parallel/sequential within 1.05.
4. speed: time per suggestion after 100, 1,000 and 10,000 completed trials, ours vs Optuna TPE.
Every comparison prints ours/anchor as a ratio (below 1 is better for regret and time).
"""
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kdsearch import KdSearch, run_concurrent, run_search  # noqa: E402

import optuna  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
BIN = sys.argv[1]
QUICK = os.environ.get("KD_BENCH_QUICK") == "1"
SEEDS = 5 if QUICK else 20
TMP = tempfile.mkdtemp(prefix="kd-bench-search-")


def write_cfg(name, hyper, searcher):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump({"hyperparameters": hyper, "searcher": searcher}, f)
    return path


# ---- test functions ---------------------------------------------------------------------
def branin(h):
    x, y = h["x"], h["y"]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def rosenbrock(h):
    x = [h["x%d" % i] for i in range(4)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3))


OPT_CENTER = {"sgd": -1.0, "momentum": -1.5, "adam": -3.0, "rmsprop": -2.5}
OPT_PENALTY = {"sgd": 0.3, "momentum": 0.15, "adam": 0.0, "rmsprop": 0.05}


def mixed(h):
    """A synthetic validation loss: optimizer choice, log learning rate and depth interact."""
    a = math.log10(h["lr"]) - OPT_CENTER[h["optimizer"]]
    b = h["layers"] - 5
    return OPT_PENALTY[h["optimizer"]] + 0.25 * a * a + 0.02 * b * b + 0.05 * a * b


FUNCS = {
    "branin": (branin, 0.397887, {
        "x": {"type": "double", "minval": -5, "maxval": 10},
        "y": {"type": "double", "minval": 0, "maxval": 15}}),
    "rosenbrock4": (rosenbrock, 0.0, {
        "x%d" % i: {"type": "double", "minval": -2, "maxval": 2} for i in range(4)}),
    "mixed": (mixed, 0.0, {
        "layers": {"type": "int", "minval": 1, "maxval": 8},
        "lr": {"type": "log", "minval": -5, "maxval": 0, "base": 10},
        "optimizer": {"type": "categorical", "vals": ["sgd", "momentum", "adam", "rmsprop"]}}),
}


def optuna_params(trial, space):
    h = {}
    for k, p in space.items():
        if p["type"] == "double":
            h[k] = trial.suggest_float(k, p["minval"], p["maxval"])
        elif p["type"] == "int":
            h[k] = trial.suggest_int(k, p["minval"], p["maxval"])
        elif p["type"] == "log":
            h[k] = trial.suggest_float(k, 10.0 ** p["minval"], 10.0 ** p["maxval"], log=True)
        elif p["type"] == "categorical":
            h[k] = trial.suggest_categorical(k, p["vals"])
    return h


def best_curve(values):
    out, b = [], float("inf")
    for v in values:
        b = min(b, v)
        out.append(b)
    return out


def ours(method, fname, seed, n):
    f, _, space = FUNCS[fname]
    cfg = write_cfg("%s-%s" % (method, fname), space, {
        "name": method, "metric": "loss", "max_trials": n, "max_concurrent_trials": 1,
        "max_length": {"batches": 1}})
    vals, _ = run_search(BIN, cfg, seed, lambda h, length: f(h))
    return best_curve([v[3] for v in vals])


def theirs(sampler, fname, seed, n):
    f, _, space = FUNCS[fname]
    s = optuna.samplers.TPESampler(seed=seed) if sampler == "tpe" else \
        optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=s)
    vals = []
    for _ in range(n):
        t = study.ask()
        v = f(optuna_params(t, space))
        study.tell(t, v)
        vals.append(v)
    return best_curve(vals)


def quality():
    print("## quality: median regret over %d seeds (lower is better)" % SEEDS)
    print("%-12s %5s %12s %12s %12s %12s %10s %9s" % (
        "function", "evals", "kdet random", "optuna rand", "kdet TPE", "optuna TPE",
        "rand ratio", "TPE ratio"))
    rows = []
    for fname, (f, fstar, space) in FUNCS.items():
        curves = {k: [] for k in ("kr", "or", "kt", "ot")}
        for seed in range(SEEDS):
            curves["kr"].append(ours("random", fname, seed, 100))
            curves["kt"].append(ours("bayesian", fname, seed, 100))
            curves["or"].append(theirs("random", fname, seed, 100))
            curves["ot"].append(theirs("tpe", fname, seed, 100))
        for n in (50, 100):
            med = {k: statistics.median(c[n - 1] - fstar for c in v) for k, v in curves.items()}
            rr = med["kr"] / med["or"] if med["or"] > 0 else float("nan")
            tr = med["kt"] / med["ot"] if med["ot"] > 0 else float("nan")
            print("%-12s %5d %12.4g %12.4g %12.4g %12.4g %10.2f %9.2f" % (
                fname, n, med["kr"], med["or"], med["kt"], med["ot"], rr, tr))
            rows.append((fname, n, med, rr, tr))
        sys.stdout.flush()
    return rows


# ---- multi-fidelity -----------------------------------------------------------------------
MF_SPACE = {
    "lr": {"type": "log", "minval": -4, "maxval": 0},
    "width": {"type": "int", "minval": 8, "maxval": 256},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam", "rmsprop"]},
}
MF_MAX = 256


def mf_asymptote(h):
    c = math.log10(h["lr"])
    return 0.05 + 0.2 * (c + 2.5) ** 2 + {"sgd": 0.1, "adam": 0.0, "rmsprop": 0.03}[
        h["optimizer"]] + 0.05 * ((h["width"] - 128) / 128.0) ** 2


def mf_curve(h, t, rng):
    """Validation loss after t units: an exponential approach from 2.3 to the asymptote with a
    time constant of 15..40 units that grows with width and, mildly, as the learning rate
    falls (so early leaders are not always the final winners), plus Gaussian noise of 0.02."""
    c = math.log10(h["lr"])
    tau = (15.0 + 25.0 * (h["width"] - 8) / 248.0) * 10 ** (-0.15 * (c + 2.5))
    a = mf_asymptote(h)
    return a + (2.3 - a) * math.exp(-t / tau) + rng.gauss(0, 0.02)


def mf_run(method, seed, max_trials):
    rng = random.Random(1000 + seed)
    cfg = write_cfg("mf-" + method, MF_SPACE, {
        "name": method, "metric": "loss", "max_trials": max_trials,
        "max_concurrent_trials": 16, "max_length": {"batches": MF_MAX}})
    vals, compute = run_search(BIN, cfg, seed, lambda h, t: mf_curve(h, t, rng))
    full = [(m, h) for _, h, n, m in vals if n == MF_MAX]
    chosen = min(full, key=lambda x: x[0])[1]
    return mf_asymptote(chosen) - 0.05, compute


def multifidelity():
    print("## multi-fidelity: simulated learning curves, %d seeds, max_length %d" % (
        SEEDS, MF_MAX))
    ar, rr, ac, rc = [], [], [], []
    for seed in range(SEEDS):
        reg, comp = mf_run("adaptive_asha", seed, 128)
        ar.append(reg)
        ac.append(comp)
        n = max(1, comp // MF_MAX)  # random gets the same total compute
        reg2, comp2 = mf_run("random", seed, n)
        rr.append(reg2)
        rc.append(comp2)
    ma, mr = statistics.median(ar), statistics.median(rr)
    print("adaptive_asha (128 trials): median regret %.4f, median compute %d" % (
        ma, statistics.median(ac)))
    print("random (same compute, %d trials): median regret %.4f, median compute %d" % (
        statistics.median(rc) // MF_MAX, mr, statistics.median(rc)))
    print("asha/random regret ratio: %.2f" % (ma / mr if mr > 0 else float("nan")))
    sys.stdout.flush()
    return ma, mr


# ---- parallel ------------------------------------------------------------------------------
PAR_SEEDS, PAR_TRIALS, PAR_CONC = 10, 100, 8


def ours_concurrent(conc, seed):
    f, _, space = FUNCS["branin"]
    cfg = write_cfg("par-%d" % conc, space, {
        "name": "bayesian", "metric": "loss", "max_trials": PAR_TRIALS,
        "max_concurrent_trials": conc, "max_length": {"batches": 1}})
    vals = run_concurrent(BIN, cfg, seed, lambda h, length: f(h))
    assert len(vals) == PAR_TRIALS, len(vals)
    return min(vals)


def parallel():
    fstar = FUNCS["branin"][1]
    print("## parallel: Branin, %d trials, median best over %d seeds (optimum %.6f)" % (
        PAR_TRIALS, PAR_SEEDS, fstar))
    seq = statistics.median(ours_concurrent(1, s) for s in range(PAR_SEEDS))
    par = statistics.median(ours_concurrent(PAR_CONC, s) for s in range(PAR_SEEDS))
    opt = statistics.median(theirs("tpe", "branin", s, PAR_TRIALS)[-1] for s in range(PAR_SEEDS))
    print("%-34s %12s %12s" % ("", "median best", "regret"))
    for name, v in (("kdet TPE, 1 at a time", seq), ("kdet TPE, %d at a time" % PAR_CONC, par),
                    ("optuna TPE, 1 at a time", opt)):
        print("%-34s %12.4f %12.4f" % (name, v, v - fstar))
    ratio = par / seq
    print("kdet parallel/sequential (median best): %.3f (goal <= 1.05: %s)" % (
        ratio, "met" if ratio <= 1.05 else "NOT met"))
    print("kdet parallel/sequential (median regret): %.3f" % ((par - fstar) / (seq - fstar)))
    print("kdet parallel/optuna sequential (median best): %.3f" % (par / opt))
    sys.stdout.flush()
    return seq, par, opt


# ---- speed ----------------------------------------------------------------------------------
POINTS = (100, 1000, 10000)


def speed_ours():
    cfg = write_cfg("speed", FUNCS["branin"][2], {
        "name": "bayesian", "metric": "loss", "max_trials": POINTS[-1] + 10,
        "max_concurrent_trials": 1, "max_length": {"batches": 1}})
    s = KdSearch(BIN, cfg, 1)
    queue = list(s.ops)
    hp, done, lat = {}, 0, {p: [] for p in POINTS}
    t_start = time.time()
    while queue:
        op = queue.pop(0)
        rid = op.get("request_id")
        if op["op"] == "create":
            hp[rid] = op["hparams"]
            queue.extend(s.send({"event": "trial_created", "request_id": rid}))
        elif op["op"] == "validate_after":
            queue.extend(s.send({"event": "validation_completed", "request_id": rid,
                                 "metric": branin(hp[rid]), "length": 1}))
        elif op["op"] == "close":
            t0 = time.perf_counter()
            ops = s.send({"event": "trial_closed", "request_id": rid})  # returns the next Create
            dt = time.perf_counter() - t0
            done += 1
            for p in POINTS:
                if p <= done < p + 10:
                    lat[p].append(dt)
            if done % 2000 == 0:
                print("  (kdet: %d trials fed, %.0f s)" % (done, time.time() - t_start))
                sys.stdout.flush()
            queue.extend(ops)
    s.close()
    return {p: statistics.median(v) for p, v in lat.items()}


def speed_optuna(n, k):
    space = FUNCS["branin"][2]
    rng = random.Random(n)
    dists = {"x": optuna.distributions.FloatDistribution(-5, 10),
             "y": optuna.distributions.FloatDistribution(0, 15)}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    trials = []
    for _ in range(n):
        p = {"x": rng.uniform(-5, 10), "y": rng.uniform(0, 15)}
        trials.append(optuna.trial.create_trial(params=p, distributions=dists, value=branin(p)))
    study.add_trials(trials)
    lat = []
    for _ in range(k):
        t0 = time.perf_counter()
        t = study.ask()
        h = optuna_params(t, space)
        lat.append(time.perf_counter() - t0)
        study.tell(t, branin(h))
    return statistics.median(lat)


def speed():
    print("## speed: time per suggestion (TPE, Branin) after N completed trials")
    mine = speed_ours()
    print("%8s %14s %14s %10s %s" % ("N", "kdet TPE", "optuna TPE", "speedup", "optuna samples"))
    out = {}
    for p, k in zip(POINTS, (10, 5, 2)):
        theirs_t = speed_optuna(p, k)
        print("%8d %11.3f ms %11.3f ms %9.1fx %d" % (
            p, mine[p] * 1e3, theirs_t * 1e3, theirs_t / mine[p], k))
        sys.stdout.flush()
        out[p] = (mine[p], theirs_t)
    return out


if __name__ == "__main__":
    t0 = time.time()
    parts = sys.argv[2:] or ["quality", "multifidelity", "parallel", "speed"]
    if "quality" in parts:
        quality()
    if "multifidelity" in parts:
        multifidelity()
    if "parallel" in parts:
        parallel()
    if "speed" in parts:
        speed()
    for f in os.listdir(TMP):
        os.unlink(os.path.join(TMP, f))
    os.rmdir(TMP)
    print("bench searcher: %.0f s" % (time.time() - t0))
