"""Run by each rank of a 2-rank launch (tests/dtrain/python/test_determined_ranks.py):
a Core API script over a DistributedDataParallel model, then what it does
after the `with` block: argv[1] is "ok", "exit3" (rank 1 calls sys.exit(3)),
"exit4" (rank 1 calls the exit(4) builtin) or "raise" (rank 1 raises). Prints what ran: the line after the block
(unflushed), an atexit handler registered before kdet's, and whether the
interpreter's teardown ran (a global's __del__). Rank 1 fails only once
rank 0's atexit handler has run, so that kdet-launch stopping rank 0 after
rank 1's failure cannot cut its output short."""
import atexit
import os
import sys
import time

import torch
import torch.distributed

import determined as det

how = sys.argv[1]
torch.distributed.init_process_group("gloo")
dist = det.core.DistributedContext.from_torch_distributed()
DONE = os.path.join(os.environ["KDET_CHECKPOINT_DIR"], "rank0-atexit")


def at_exit():
    print(f"rank {dist.rank} user atexit ran", flush=True)
    if dist.rank == 0:
        open(DONE, "w").close()


atexit.register(at_exit)


class Teardown:
    def __del__(self):
        print(f"rank {dist.rank} interpreter teardown ran", flush=True)


kept = Teardown()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
with det.core.init(distributed=dist) as ctx:
    model(torch.ones(3, 4)).sum().backward()
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
print(f"rank {dist.rank} after the block")  # no flush: kdet's exit flushes it
if dist.rank == 1 and how != "ok":
    for _ in range(600):  # up to 60 s
        if os.path.exists(DONE):
            break
        time.sleep(0.1)
if dist.rank == 1 and how == "exit3":
    sys.exit(3)
if dist.rank == 1 and how == "exit4":
    exit(4)
if dist.rank == 1 and how == "raise":
    raise RuntimeError("boom after the block")
