"""Run by each rank of a 2-rank launch (tests/dtrain/python/test_determined_ranks.py):
Determined-style Core API collectives and a sharded checkpoint. Prints one
line `result <json>` per rank."""
import json

import torch.distributed

import determined as det

torch.distributed.init_process_group("gloo")
dist = det.core.DistributedContext.from_torch_distributed()
out = {"rank": dist.rank, "size": dist.size, "local_rank": dist.local_rank,
       "local_size": dist.local_size, "cross_rank": dist.cross_rank,
       "cross_size": dist.cross_size}
out["allgather"] = dist.allgather({"r": dist.rank, "sq": dist.rank * dist.rank})
out["gather"] = dist.gather(dist.rank + 10)
out["broadcast"] = dist.broadcast(f"from-{dist.rank}")
out["allgather_local"] = dist.allgather_local(dist.local_rank)
out["gather_local"] = dist.gather_local(dist.local_rank)
out["broadcast_local"] = dist.broadcast_local(f"local-{dist.rank}")
with det.core.init(distributed=dist) as ctx:
    with ctx.checkpoint.store_path({"steps_completed": 5}, shard=True) as (path, sid):
        (path / f"shard-{dist.rank}.txt").write_text(f"rank {dist.rank}")
    out["storage_id"] = sid
    files = {}
    with ctx.checkpoint.restore_path(sid) as p:
        for f in sorted(p.iterdir()):
            if f.name.startswith("shard-"):
                files[f.name] = f.read_text()
    out["restored"] = files
    out["preempt"] = ctx.preempt.should_preempt()
    ops = []
    for op in ctx.searcher.operations():
        ops.append(op.length)
        if dist.rank == 0:
            op.report_completed(0.5)
    out["ops"] = ops
print("result " + json.dumps(out, sort_keys=True), flush=True)
