"""The soak test's workload: a continuous mix of small experiments (grid,
random, adaptive ASHA, PBT, a multi-pod trial over both nodes, a PyTorch
Core API trial) and, at random, pauses, activations, cancels, priority
changes and deletes. Every action is recorded, so that the end state of an
experiment can be checked against what was done to it.

Workers write what they report to OUT/<trial>.<run id>.<rank>.log
(fashion-mnist-c --print-reports, torch_trial.py), after a first line
`trial-int-id N` (the store's trial id, KDET_TRIAL_INT_ID): `report KIND
batches=N {json}` before handing a row over, `acked validation batches=N`
once the controller acknowledged a validation and every row before it."""
import os
import random
import threading
import time

EXP_PATH = "/apis/kdet.io/v1alpha1/namespaces/default/experiments"

KINDS = {
    # kind: (weight, slots per trial)
    "grid": (3, 1),
    "random": (3, 1),
    "asha": (3, 1),
    "pbt": (2, 1),
    "multipod": (2, 4),
    "torch": (1, 1),
}


def fmnist_cmd(T):
    return (f"sh {T}/worker.sh fashion-mnist-c --train-limit 1600 --test-limit 300 --quiet "
            f"--print-reports --report-every 8")


def spec_for(kind, name, T, src, rng):
    env = ["OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "DTRAIN_TIMEOUT=60",
           "DTRAIN_RENDEZVOUS_TIMEOUT=60", f"TMPDIR={T}/tmp", f"SOAK_OUT={T}/out"]
    hp = {"global_batch_size": 32, "hidden_units": 16, "momentum": 0.9,
          "learning_rate": {"type": "double", "minval": 0.02, "maxval": 0.1}}
    searcher = {"metric": "validation_loss", "smaller_is_better": True}
    entry = fmnist_cmd(T)
    slots = KINDS[kind][1]
    if kind == "grid":
        hp["learning_rate"] = {"type": "double", "minval": 0.03, "maxval": 0.09, "count": 2}
        hp["hidden_units"] = {"type": "categorical", "vals": [8, 16]}
        searcher.update(name="grid", max_length={"batches": 96}, max_concurrent_trials=2)
    elif kind == "random":
        searcher.update(name="random", max_trials=4, max_length={"batches": 96},
                        max_concurrent_trials=2)
    elif kind == "asha":
        searcher.update(name="adaptive_asha", max_trials=6, max_length={"batches": 128},
                        max_rungs=3, divisor=2, max_concurrent_trials=3)
    elif kind == "pbt":
        searcher.update(name="pbt", population_size=3, num_rounds=3,
                        length_per_round={"batches": 32},
                        replace_function={"truncate_fraction": 0.34},
                        explore_function={"resample_probability": 0.2, "perturb_factor": 0.2})
    elif kind == "multipod":
        hp["learning_rate"] = 0.05
        searcher.update(name="single", max_length={"batches": 64})
    elif kind == "torch":
        entry = f"/usr/bin/python3 {src}/e2e/soak/torch_trial.py"
        hp = {"learning_rate": {"type": "double", "minval": 0.01, "maxval": 0.1},
              "global_batch_size": 16}
        searcher.update(name="random", max_trials=2, max_length={"batches": 40},
                        max_concurrent_trials=1)
    spec = {
        "name": name,
        "entrypoint": entry,
        "environment": {"environment_variables": env},
        "hyperparameters": hp,
        "searcher": searcher,
        "reproducibility": {"experiment_seed": rng.randrange(1, 1 << 30)},
        "checkpoint_storage": {"type": "shared_fs", "host_path": f"{T}/ckpt/{name}"},
        "max_restarts": 40,
        "resources": {"slots_per_trial": slots, "priority": rng.choice([20, 42, 42, 60])},
    }
    return spec


class Workload:
    def __init__(self, kube, T, src, rng, say, max_live=3):
        self.kube, self.T, self.src, self.rng, self.say = kube, T, src, rng, say
        self.max_live = max_live
        self.n = 0
        self.exps = {}  # name -> {"kind", "created", "actions": [(t, what)], "deleted": bool}
        self.actions = {}  # kind of action -> count
        self.errors = 0
        self.lock = threading.Lock()
        self.paused_until = {}
        os.makedirs(f"{T}/out", exist_ok=True)
        os.makedirs(f"{T}/tmp", exist_ok=True)
        with open(f"{T}/worker.sh", "w") as f:
            f.write('out="$SOAK_OUT/$KDET_TRIAL_ID.$KDET_RUN_ID.${RANK:-0}.log"\n'
                    'echo "trial-int-id $KDET_TRIAL_INT_ID" >>"$out"\n'
                    'exec "$@" >>"$out"\n')

    def _count(self, what):
        self.actions[what] = self.actions.get(what, 0) + 1

    def note(self, name, what):
        with self.lock:
            e = self.exps.get(name)
            if e is not None:
                e["actions"].append((time.time(), what))
        self._count(what)

    def live(self):
        """Experiments not ended and not deleted, from the API (None when unreachable)."""
        try:
            items = self.kube.items(EXP_PATH)
        except Exception:
            return None
        out = []
        for x in items:
            st = x.get("status", {}).get("state", "")
            if st not in ("COMPLETED", "CANCELED", "ERROR") and \
                    not x["metadata"].get("deletionTimestamp"):
                out.append(x)
        return out

    def create(self, kind=None):
        if kind is None:
            ks = list(KINDS)
            kind = self.rng.choices(ks, [KINDS[k][0] for k in ks])[0]
        self.n += 1
        name = f"soak-{kind}-{self.n}"
        os.makedirs(f"{self.T}/ckpt/{name}", exist_ok=True)
        body = {"apiVersion": "kdet.io/v1alpha1", "kind": "Experiment",
                "metadata": {"name": name},
                "spec": spec_for(kind, name, self.T, self.src, self.rng)}
        try:
            self.kube.create(EXP_PATH, body)
        except Exception as e:
            self.errors += 1
            self.say(f"workload: create {name}: {e}")
            return None
        with self.lock:
            self.exps[name] = {"kind": kind, "created": time.time(), "actions": [],
                               "deleted": False}
        self._count("create")
        self.say(f"workload: created {name}")
        return name

    def tick(self, allow_new=True):
        """One round: top up to max_live experiments, then maybe one random action."""
        live = self.live()
        if live is None:
            return
        names = [x["metadata"]["name"] for x in live if x["metadata"]["name"] in self.exps]
        kinds = [self.exps[n]["kind"] for n in names]
        if allow_new and len(names) < self.max_live:
            k = None
            if "torch" in kinds:  # one PyTorch experiment at a time: torch is heavy on 2 cores
                k = self.rng.choice(["grid", "random", "asha", "pbt", "multipod"])
            self.create(k)
        now = time.time()
        # Activate what was paused long enough.
        for n, until in list(self.paused_until.items()):
            if now >= until:
                if self._patch(n, {"spec": {"paused": False}}):
                    self.note(n, "activate")
                del self.paused_until[n]
        if not names or self.rng.random() > 0.5:
            return
        n = self.rng.choice(names)
        r = self.rng.random()
        if r < 0.35 and n not in self.paused_until:
            if self._patch(n, {"spec": {"paused": True}}):
                self.note(n, "pause")
                self.paused_until[n] = now + self.rng.uniform(3, 15)
        elif r < 0.7:
            p = self.rng.choice([10, 30, 42, 55, 80])
            if self._patch(n, {"spec": {"resources": {"priority": p}}}):
                self.note(n, "priority")
        elif r < 0.85:
            self.cancel(n)
        else:
            self.delete(n)

    def cancel(self, n):
        """Cancel n, keeping the state the experiment had when the cancel was stored (a
        cancel may arrive just after the experiment ended)."""
        try:
            x = self.kube.patch(f"{EXP_PATH}/{n}", {"spec": {"canceled": True}})
        except Exception as e:
            self.errors += 1
            self.say(f"workload: cancel {n}: {e}")
            return False
        st = x.get("status", {}).get("state", "")
        with self.lock:
            self.exps[n].setdefault("cancels", []).append((time.time(), st))
        self.paused_until.pop(n, None)
        self.note(n, "cancel")
        self.say(f"workload: canceled {n} (was {st or 'new'})")
        return True

    def delete(self, n):
        try:
            self.kube.delete(f"{EXP_PATH}/{n}")
        except Exception as e:
            self.errors += 1
            self.say(f"workload: delete {n}: {e}")
            return False
        with self.lock:
            self.exps[n]["deleted"] = True
        self.paused_until.pop(n, None)
        self.note(n, "delete")
        self.say(f"workload: deleted {n}")
        return True

    def _patch(self, n, body):
        try:
            self.kube.patch(f"{EXP_PATH}/{n}", body)
            return True
        except Exception as e:
            self.errors += 1
            self.say(f"workload: patch {n} {body}: {e}")
            return False

    def unpause_all(self):
        for n in list(self.paused_until):
            if self._patch(n, {"spec": {"paused": False}}):
                self.note(n, "activate")
            del self.paused_until[n]
