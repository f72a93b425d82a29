#!/usr/bin/python3
"""A small regression PyTorchTrial for tests/dtrain/python/test_harness.py,
importable (Regress) and runnable as a script (one or more ranks, off the
cluster or as an experiment's entrypoint).

Hyperparameters: global_batch_size, lr, momentum, records (points in the
training set), loader ("det": det.pytorch.DataLoader, "torch": a torch
DataLoader), shuffle, dropout, noise (a numpy and a `random` draw per
batch), amp (autocast and a wrapped GradScaler), clip (max gradient norm),
count_allreduce (count the gradient allreduces of DDP with a comm hook).

As a script, the environment says what to do: KDET_TEST_HP (hyperparameters
off-cluster, JSON), KDET_TEST_CONF (the experiment config off-cluster),
KDET_TEST_FIT (fit's arguments: {"max_length": {"epochs": 3}, ...}),
KDET_TEST_LOG (a file each rank appends "rank batch epoch ids" to for every
batch it trains), KDET_TEST_KILL_AT (the batch before which the worker
SIGKILLs itself, on its first attempt: when KDET_LATEST_CHECKPOINT and
KDET_TEST_RESUMED are unset) and KDET_TEST_OUT (a directory: rank{R}.pth,
the final weights, and rank{R}.json).
"""
import json
import os
import random
import signal
import sys

import numpy
import torch
import torch.nn.functional as F
from torch import nn

from determined import pytorch


def dataset(n, seed=1234):
    g = torch.Generator()
    g.manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 3.0, 0.5]) + 0.1 * torch.randn(n, generator=g)
    return torch.utils.data.TensorDataset(x, y.reshape(-1, 1), torch.arange(n))


class Steps(pytorch.PyTorchCallback):
    """Counts optimizer steps and the epochs' starts and ends."""

    def __init__(self):
        self.steps = 0
        self.epochs = []

    def on_before_optimizer_step(self, parameters):
        self.steps += 1

    def on_training_epoch_start(self, epoch_idx):
        self.epochs.append(("start", epoch_idx))

    def on_training_epoch_end(self, epoch_idx):
        self.epochs.append(("end", epoch_idx))


class Regress(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.hp = hp = context.get_hparams()
        self.model = context.wrap_model(nn.Sequential(
            nn.Linear(4, 16), nn.ReLU(), nn.Dropout(hp.get("dropout", 0.0)), nn.Linear(16, 1)))
        self.opt = context.wrap_optimizer(torch.optim.SGD(
            self.model.parameters(), lr=hp.get("lr", 0.05), momentum=hp.get("momentum", 0.0)))
        self.allreduces = 0
        if hp.get("count_allreduce"):
            for m in context._ddp_models:
                m.register_comm_hook(None, self._counting_allreduce)
        self.scaler = None
        if hp.get("amp"):
            self.scaler = context.wrap_scaler(
                torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available()))
        self.callback = Steps()
        self.batches_seen = []  # (batch_idx, epoch_idx, sample ids)
        self.clipped = 0
        self.amp_dtype = None
        self.log = os.environ.get("KDET_TEST_LOG")
        kill = os.environ.get("KDET_TEST_KILL_AT")
        first = not os.environ.get("KDET_LATEST_CHECKPOINT") and \
            not os.environ.get("KDET_TEST_RESUMED")
        self.kill_at = int(kill) if kill and first else -1

    def _counting_allreduce(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        self.allreduces += 1
        return default_hooks.allreduce_hook(state, bucket)

    def build_callbacks(self):
        return {"steps": self.callback}

    def build_training_data_loader(self):
        ds = dataset(self.hp.get("records", 80))
        bs = self.context.get_per_slot_batch_size()
        if self.hp.get("loader", "det") == "torch":
            return torch.utils.data.DataLoader(ds, batch_size=bs,
                                               shuffle=self.hp.get("shuffle", True))
        return pytorch.DataLoader(ds, batch_size=bs, shuffle=self.hp.get("shuffle", True))

    def build_validation_data_loader(self):
        return pytorch.DataLoader(dataset(32, seed=99), batch_size=8)

    def _clip(self, params):
        self.clipped += 1
        torch.nn.utils.clip_grad_norm_(params, self.hp["clip"])

    def train_batch(self, batch, epoch_idx, batch_idx):
        if batch_idx == self.kill_at:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        x, y, ids = batch
        self.batches_seen.append((batch_idx, epoch_idx, ids.tolist()))
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{self.context.distributed.rank} {batch_idx} {epoch_idx} "
                        f"{json.dumps(ids.tolist())}\n")
        if self.hp.get("noise"):
            scale = random.random()
            x = x + scale * torch.from_numpy(numpy.random.normal(0, 0.05, tuple(x.shape))).float()
        if self.scaler is not None:
            dev = self.context.device.type
            dtype = torch.float16 if dev == "cuda" else torch.bfloat16
            with torch.autocast(dev, dtype=dtype):
                out = self.model(x)
            self.amp_dtype = out.dtype
            loss = F.mse_loss(out.float(), y)
            self.context.backward(self.scaler.scale(loss))
        else:
            loss = F.mse_loss(self.model(x), y)
            self.context.backward(loss)
        self.context.step_optimizer(self.opt, scaler=self.scaler,
                                    clip_grads=self._clip if self.hp.get("clip") else None)
        return {"loss": loss, "rank": float(self.context.distributed.rank)}

    def evaluate_batch(self, batch):
        x, y, _ = batch
        return {"validation_loss": F.mse_loss(self.model(x), y)}


def _unit(v):
    (unit, n), = v.items()
    return pytorch.Epoch(n) if unit == "epochs" else pytorch.Batch(n)


def main():
    import determined as det
    off = det.get_cluster_info() is None
    hp = json.loads(os.environ.get("KDET_TEST_HP") or "{}") if off else None
    conf = json.loads(os.environ.get("KDET_TEST_CONF") or "{}") if off else None
    fit = json.loads(os.environ.get("KDET_TEST_FIT") or "{}")
    for k in ("max_length", "checkpoint_period", "validation_period", "reporting_period"):
        if k in fit:
            fit[k] = _unit(fit[k])
    with pytorch.init(hparams=hp, exp_conf=conf) as ctx:
        trial = Regress(ctx)
        pytorch.Trainer(trial, ctx).fit(**fit)
        out = os.environ.get("KDET_TEST_OUT")
        if out:
            r = ctx.distributed.rank
            torch.save(ctx.models[0].state_dict(), os.path.join(out, f"rank{r}.pth"))
            hooks = [m._get_ddp_logging_data().get("comm_hook") for m in ctx._ddp_models]
            with open(os.path.join(out, f"rank{r}.json"), "w") as f:
                json.dump({"steps": trial.callback.steps, "hooks": hooks,
                           "allreduces": trial.allreduces,
                           "seen": trial.batches_seen}, f)


if __name__ == "__main__":
    main()
