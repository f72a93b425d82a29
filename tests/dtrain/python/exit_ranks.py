"""Run by each rank of a 2-rank launch (tests/dtrain/python/test_determined_ranks.py):
a Core API script over a DistributedDataParallel model, then what it does
after the `with` block: argv[1] is "ok", "exit3" (rank 1 calls sys.exit(3))
or "raise" (rank 1 raises). Prints what ran: the line after the block
(unflushed), an atexit handler registered before kdet's, and whether the
interpreter's teardown ran (a global's __del__)."""
import atexit
import sys

import torch
import torch.distributed

import determined as det

how = sys.argv[1]
torch.distributed.init_process_group("gloo")
dist = det.core.DistributedContext.from_torch_distributed()
atexit.register(print, f"rank {dist.rank} user atexit ran", flush=True)


class Teardown:
    def __del__(self):
        print(f"rank {dist.rank} interpreter teardown ran", flush=True)


kept = Teardown()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
with det.core.init(distributed=dist) as ctx:
    model(torch.ones(3, 4)).sum().backward()
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
print(f"rank {dist.rank} after the block")  # no flush: kdet's exit flushes it
if dist.rank == 1 and how == "exit3":
    sys.exit(3)
if dist.rank == 1 and how == "raise":
    raise RuntimeError("boom after the block")
