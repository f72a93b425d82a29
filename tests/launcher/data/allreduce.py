"""A two-process gloo all_reduce: checks the env:// contract set by kdet-launch or torchrun."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
world = dist.get_world_size()
assert rank == int(os.environ["RANK"]), "RANK disagrees with the process group"
assert world == int(os.environ["WORLD_SIZE"]), "WORLD_SIZE disagrees with the process group"
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"allreduce sum={t.item():.1f} world={world} local_rank={os.environ['LOCAL_RANK']}", flush=True)
dist.destroy_process_group()
