#!/usr/bin/env python3
"""Fashion-MNIST with Determined's Core API, run by kdet: metrics,
checkpoints, hyperparameters, the searcher, preemption and data-parallel
training over torch.distributed (gloo on CPU).

On the cluster the experiment's entrypoint runs it (const.yaml);
off-cluster: `python3 train.py --batches 200` (one rank), or two ranks with
`python3 -m determined.launch.torch_distributed python3 train.py`.
"""
import argparse
import gzip
import logging
import os
import struct

import torch
import torch.distributed
import torch.nn.functional as F
from torch import nn

import determined as det

DATA_DIR = "/usr/share/datasets/fashion-mnist"
HPARAMS = {"learning_rate": 0.05, "hidden_units": 64, "global_batch_size": 64,
           "train_examples": 6400, "validation_examples": 1000}


def read_idx(path, limit):
    with gzip.open(path, "rb") as f:
        zero, dtype, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or dtype != 0x08:
            raise ValueError(f"{path}: not an idx file of unsigned bytes")
        shape = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        shape[0] = min(shape[0], limit)
        n = 1
        for d in shape:
            n *= d
        return torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8).reshape(shape)


def load(split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(DATA_DIR, f"{prefix}-images-idx3-ubyte.gz"), limit)
    y = read_idx(os.path.join(DATA_DIR, f"{prefix}-labels-idx1-ubyte.gz"), limit)
    return x.reshape(x.shape[0], -1).float().div_(255.0).sub_(0.2860).div_(0.3530), y.long()


def save_state(path, model, opt, batches):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "batches": batches},
               path / "state.pth")


def load_state(core_context, storage_id, model, opt):
    with core_context.checkpoint.restore_path(storage_id) as path:
        state = torch.load(path / "state.pth")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["batches"]


def validate(model, vx, vy, dist):
    model.eval()
    with torch.no_grad():
        out = model(vx[dist.rank::dist.size])
        y = vy[dist.rank::dist.size]
        loss = F.cross_entropy(out, y, reduction="sum").item()
        right = (out.argmax(1) == y).sum().item()
    model.train()
    parts = dist.allgather((loss, right, len(y)))
    n = sum(p[2] for p in parts)
    return {"validation_loss": sum(p[0] for p in parts) / n,
            "accuracy": sum(p[1] for p in parts) / n}


def main(core_context, hparams, latest_checkpoint, report_every):
    dist = core_context.distributed
    torch.manual_seed(1234)
    x, y = load("train", int(hparams["train_examples"]))
    vx, vy = load("test", int(hparams["validation_examples"]))
    x, y = x[dist.rank::dist.size], y[dist.rank::dist.size]
    per_rank = int(hparams["global_batch_size"]) // dist.size
    model = nn.Sequential(nn.Linear(784, int(hparams["hidden_units"])), nn.ReLU(),
                          nn.Linear(int(hparams["hidden_units"]), 10))
    if dist.size > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=float(hparams["learning_rate"]), momentum=0.9)

    batches = 0
    if latest_checkpoint is not None:
        batches = load_state(core_context, latest_checkpoint, model, opt)
        logging.info("resumed from %s at batch %d", latest_checkpoint, batches)

    core_context.profiler.on()
    for op in core_context.searcher.operations():
        while batches < op.length:
            i = (batches * per_rank) % max(1, x.shape[0] - per_rank)
            loss = F.cross_entropy(model(x[i:i + per_rank]), y[i:i + per_rank])
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            if batches % report_every == 0:
                losses = dist.allgather(loss.item())
                core_context.train.report_training_metrics(
                    steps_completed=batches, metrics={"loss": sum(losses) / len(losses)})
                op.report_progress(batches)
                if core_context.preempt.should_preempt():
                    break
        metrics = validate(model, vx, vy, dist)
        core_context.train.report_validation_metrics(steps_completed=batches, metrics=metrics)
        if dist.rank == 0:
            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, sid):
                save_state(path, model, opt, batches)
        if core_context.preempt.should_preempt():
            return
        if dist.rank == 0:
            op.report_completed(metrics["validation_loss"])
    core_context.profiler.off()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200, help="off-cluster: batches to train")
    ap.add_argument("--report-every", type=int, default=50)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    info = det.get_cluster_info()
    hparams = dict(HPARAMS)
    latest_checkpoint = None
    if info is not None:
        hparams.update(info.trial.hparams)
        latest_checkpoint = info.latest_checkpoint
        logging.info("trial %d of experiment %d", info.trial.trial_id, info.trial.experiment_id)
    distributed = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        torch.distributed.init_process_group("gloo")
        distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed, max_length=args.batches) as core_context:
        main(core_context, hparams, latest_checkpoint, args.report_every)
