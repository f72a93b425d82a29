#!/usr/bin/python3
"""Two ranks of a PyTorchTrial under kdet-launch --nproc 2 --trial: gloo
DistributedDataParallel leaves equal weights on both ranks, only the chief
checkpoints; SIGTERM to the launcher makes both ranks checkpoint and stop,
and the trial resumes from that checkpoint on two ranks."""
import json
import os
import re
import signal
import time

import tk
from tk import case, check

HP = {"synthetic": True, "lr": 0.05, "batch_size": 16, "train_examples": 512,
      "validation_examples": 512, "hidden": 16}


def launch(trial, d, extra=(), **kw):
    e = tk.env(KDET_HPARAMS=json.dumps(HP), KDET_CHECKPOINT_DIR=d,
               KDET_MASTER_PORT=tk.free_port(), **kw)
    return [tk.LAUNCH, "--nproc", "2", "--grace-period", "20"] + list(extra) + \
        ["--trial", f"{tk.TRIALS}:{trial}"], e


@case
def test_two_ranks_equal_weights():
    import torch
    d, out_dir = tk.tmpdir(), tk.tmpdir()
    argv, e = launch("DumpTrial", d, KDET_TEST_OUT=out_dir, KDET_MAX_LENGTH=30)
    rc, out = tk.run(argv, e, timeout=150)
    check(rc == 0, f"rc={rc}\n{out}")
    check("[rank=0] kdet: trial stopped batches_trained=30" in out, out)
    check("[rank=1] kdet: trial stopped batches_trained=30" in out, out)
    # Metrics are reported once, by the chief, averaged over both ranks.
    check(len(re.findall(r"\[rank=0\] kdet: training metrics", out)) == 3, out)
    check("[rank=1] kdet: training metrics" not in out, out)
    check(len(re.findall(r"kdet: validation metrics", out)) == 1, out)
    a = torch.load(os.path.join(out_dir, "rank0.pth"))
    b = torch.load(os.path.join(out_dir, "rank1.pth"))
    for k in a:
        check(torch.equal(a[k], b[k]), f"{k} differs between ranks")
    check(len(os.listdir(d)) == 1, f"one checkpoint expected: {os.listdir(d)}")
    # The checkpoint holds the same weights.
    st = torch.load(os.path.join(d, os.listdir(d)[0], "state_dict.pth"))
    for k in a:
        check(torch.equal(a[k], st["models"][0][k]), f"checkpointed {k} differs")
    check(st["batches_trained"] == 30, st["batches_trained"])


@case
def test_sigterm_checkpoints_and_resumes():
    d = tk.tmpdir()
    argv, e = launch("SlowTrial", d, KDET_MAX_LENGTH=100000, KDET_TEST_SLEEP="0.02",
                     KDET_PREEMPT_EVERY=5)
    p = tk.start(argv, e)
    seen = []
    t0 = time.monotonic()
    for line in p.stdout:  # until the first training report
        seen.append(line)
        if "kdet: training metrics" in line:
            break
        check(time.monotonic() - t0 < 120, "no training metrics in 120 s")
    p.send_signal(signal.SIGTERM)
    try:
        rest, _ = p.communicate(timeout=60)
    except Exception:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    out = "".join(seen) + rest
    check(p.returncode == 143, f"rc={p.returncode}\n{out[-3000:]}")
    m = re.search(r"\[rank=0\] kdet: trial preempted batches_trained=(\d+) checkpoint=(\S+)", out)
    check(m, out[-3000:])
    check(f"[rank=1] kdet: trial preempted batches_trained={m.group(1)}" in out, out[-3000:])
    n, uuid = int(m.group(1)), m.group(2)
    check(n % 5 == 0 and n > 0, n)
    check(os.path.exists(os.path.join(d, uuid, "kdet-manifest.json")), os.listdir(d))

    argv, e = launch("SlowTrial", d, KDET_MAX_LENGTH=n + 10, KDET_TEST_SLEEP="0",
                     KDET_LATEST_CHECKPOINT=uuid)
    rc, out = tk.run(argv, e, timeout=150)
    check(rc == 0, f"rc={rc}\n{out}")
    for r in (0, 1):
        check(f"[rank={r}] kdet: restored checkpoint uuid={uuid} batches_trained={n}" in out,
              out)
        check(f"[rank={r}] kdet: trial stopped batches_trained={n + 10}" in out, out)


if __name__ == "__main__":
    tk.main()
