#!/usr/bin/env python3
"""Fashion-MNIST MLP in PyTorch on CPU, for kdet.

Reads its hyperparameters from KDET_HPARAMS (JSON), its seed from
KDET_TRIAL_SEED, and trains data-parallel with torch.distributed (gloo,
env://) when kdet-launch starts it with WORLD_SIZE > 1. Metrics go to
stdout as one JSON object per line.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DEFAULTS = {
    "global_batch_size": 64,
    "learning_rate": 0.05,
    "hidden_units": 128,
    "momentum": 0.9,
    "weight_decay": 0.0001,
}


def read_idx(path):
    """An idx file (gzip'd) as a uint8 tensor of its declared shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8)
    return t.reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = x.reshape(x.shape[0], -1).float().div_(255.0).sub_(0.2860).div_(0.3530)
    return x, y.long()


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def report(kind, **fields):
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"type": kind, **fields}), flush=True)


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        out = model(x)
        loss = F.cross_entropy(out, y).item()
        acc = (out.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batches", type=int, default=600, help="batches to train (global)")
    ap.add_argument("--validate-every", type=int, default=200)
    args = ap.parse_args()

    hp = dict(DEFAULTS)
    hp.update(json.loads(os.environ.get("KDET_HPARAMS", "{}") or "{}"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(int(os.environ.get("KDET_TRIAL_SEED", "0")))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(world, 1)))
    if world > 1:
        dist.init_process_group("gloo", init_method="env://")

    x, y = load(args.data, "train")
    vx, vy = load(args.data, "test")
    # each rank reads its own shard; the global batch is split evenly
    x, y = x[rank::world], y[rank::world]
    per_rank = max(1, int(hp["global_batch_size"]) // world)

    model = MLP(int(hp["hidden_units"]))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(
        model.parameters(),
        lr=float(hp["learning_rate"]),
        momentum=float(hp["momentum"]),
        weight_decay=float(hp["weight_decay"]),
    )
    report("start", hparams=hp, world_size=world)
    start = time.monotonic()
    perm = torch.randperm(x.shape[0])
    pos = 0
    for batch in range(1, args.batches + 1):
        if pos + per_rank > x.shape[0]:
            perm, pos = torch.randperm(x.shape[0]), 0
        idx = perm[pos : pos + per_rank]
        pos += per_rank
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if batch % 50 == 0:
            report("training", batches=batch, loss=round(loss.item(), 5))
        if batch % args.validate_every == 0 or batch == args.batches:
            vloss, acc = evaluate(model, vx, vy)
            report("validation", batches=batch, validation_loss=round(vloss, 5),
                   accuracy=round(acc, 5), seconds=round(time.monotonic() - start, 2))
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
