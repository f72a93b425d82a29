#!/usr/bin/python3
"""Determined's API on two ranks (gloo, CPU), off-cluster:
DistributedContext collectives and a sharded checkpoint under kdet-launch;
`python3 -m determined.launch.torch_distributed` (torchrun of Debian's
torch 1.13) running the Core API and Trainer examples."""
import json
import os
import re

import tk
from tk import case, check

STAGED = os.path.join(tk.BUILD, "lib", "python")
HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER_EX = os.path.join(tk.SRC, "examples", "pytorch-fashion-mnist", "trainer-api",
                          "train.py")
CORE_EX = os.path.join(tk.SRC, "examples", "core-api-fashion-mnist", "train.py")


def rows(out, kind):
    return [(m.group(1), int(m.group(2)), json.loads(m.group(3))) for m in re.finditer(
        rf"(\[rank=\d\] )?kdet: {kind} metrics steps_completed=(\d+) (\{{.*\}})", out)]


def two_slots(**kw):
    """A worker env whose pod has two slots (kdet-launch counts
    CUDA_VISIBLE_DEVICES; torch here is CPU-only and ignores it)."""
    return tk.env(CUDA_VISIBLE_DEVICES="0,1", PYTHONPATH=STAGED, **kw)


@case
def test_core_collectives_and_sharded_checkpoint():
    d = tk.tmpdir()
    e = tk.env(KDET_CHECKPOINT_DIR=d, KDET_MAX_LENGTH="3", PYTHONPATH=None)
    rc, out = tk.run([tk.LAUNCH, "--nproc", "2", tk.PY, os.path.join(HERE, "core_ranks.py")], e,
                     timeout=120)
    check(rc == 0, out)
    res = {}
    for m in re.finditer(r"\[rank=(\d)\] result (\{.*\})", out):
        res[int(m.group(1))] = json.loads(m.group(2))
    check(sorted(res) == [0, 1], out)
    r0, r1 = res[0], res[1]
    for r, v in res.items():
        check((v["rank"], v["size"], v["local_rank"], v["local_size"], v["cross_rank"],
               v["cross_size"]) == (r, 2, r, 2, 0, 1), v)
        check(v["allgather"] == [{"r": 0, "sq": 0}, {"r": 1, "sq": 1}], v)
        check(v["broadcast"] == "from-0" and v["broadcast_local"] == "local-0", v)
        check(v["allgather_local"] == [0, 1], v)
        check(v["ops"] == [3] and v["preempt"] is False, v)
        check(v["restored"] == {"shard-0.txt": "rank 0", "shard-1.txt": "rank 1"}, v)
    check(r0["gather"] == [10, 11] and r1["gather"] is None, (r0["gather"], r1["gather"]))
    check(r0["gather_local"] == [0, 1] and r1["gather_local"] is None, "gather_local")
    check(r0["storage_id"] == r1["storage_id"], "ranks disagree on the storage id")
    check(os.listdir(d) == [r0["storage_id"]], os.listdir(d))


@case
def test_torch_distributed_core_api_matches_one_rank():
    args = [CORE_EX, "--batches", "40", "--report-every", "20"]
    e1 = tk.env(KDET_CHECKPOINT_DIR=tk.tmpdir(), PYTHONPATH=STAGED)
    rc, one = tk.run([tk.PY] + args, e1, timeout=120)
    check(rc == 0, one)
    e2 = two_slots(KDET_CHECKPOINT_DIR=tk.tmpdir())
    rc, two = tk.run([tk.PY, "-m", "determined.launch.torch_distributed", tk.PY] + args, e2,
                     timeout=180)
    check(rc == 0, two)
    check('launcher=torchrun nproc=2' in two, two)
    a, b = rows(one, "training"), rows(two, "training")
    check([s for _, s, _ in a] == [20, 40] and [s for _, s, _ in b] == [20, 40], (a, b))
    check(all(p == "[rank=0] " for p, _, _ in b), f"training rows from rank 1: {b}")
    # The global batch split over two ranks with DDP trains the same model.
    for (_, s, m1), (_, _, m2) in zip(a, b):
        check(abs(m1["loss"] - m2["loss"]) < 1e-4, f"loss at {s}: {m1} vs {m2}")


@case
def test_multi_rank_exit_skips_teardown_keeps_status():
    """torch 1.13 can abort or hang destroying a gloo group DDP holds: a
    multi-rank Core API worker leaves with os._exit at interpreter exit,
    after the other atexit handlers and a flush, with the script's status."""
    script = os.path.join(HERE, "exit_ranks.py")
    for how, want in (("ok", None), ("exit3", 3), ("exit4", 4), ("raise", 1)):
        e = tk.env(KDET_CHECKPOINT_DIR=tk.tmpdir(), PYTHONPATH=STAGED)
        rc, out = tk.run([tk.LAUNCH, "--nproc", "2", tk.PY, script, how], e, timeout=120)
        check((rc == 0) == (want is None), (how, rc, out))
        for r in (0, 1):
            check(f"[rank={r}] rank {r} after the block" in out, (how, r, out))
            check(f"[rank={r}] rank {r} user atexit ran" in out, (how, r, out))
            check(f"rank {r} interpreter teardown ran" not in out, (how, r, out))
        if want is not None:
            check(re.search(rf'worker failed" rank=1 pid=\d+ exit_code={want}\b', out),
                  (how, out))
            check('worker failed" rank=0' not in out, (how, out))
        if how == "raise":
            check("RuntimeError: boom after the block" in out, out)


@case
def test_torch_distributed_trainer_two_ranks():
    d = tk.tmpdir()
    e = two_slots(KDET_CHECKPOINT_DIR=d)
    rc, out = tk.run([tk.PY, "-m", "determined.launch.torch_distributed", tk.PY, TRAINER_EX,
                      "--train-examples", "3200", "--validation-examples", "500",
                      "--validation-period", "25"], e, timeout=180)
    check(rc == 0, out)
    # 3200 examples, 32 a rank: 50 batches an epoch on each rank.
    tr = rows(out, "training")
    check([(p, s) for p, s, _ in tr] == [("[rank=0] ", 50)], tr)
    va = rows(out, "validation")
    check([(p, s) for p, s, _ in va] == [("[rank=0] ", 25), ("[rank=0] ", 50)], va)
    check(va[-1][2]["accuracy"] > 0.6, va)
    ends = re.findall(r"\[rank=(\d)\] kdet: trial stopped batches_trained=50 checkpoint=(\S+)",
                      out)
    check(sorted(r for r, _ in ends) == ["0", "1"] and len({u for _, u in ends}) == 1, ends)
    check(os.path.exists(os.path.join(d, ends[0][1], "state_dict.pth")), os.listdir(d))


if __name__ == "__main__":
    tk.main()
