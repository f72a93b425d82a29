"""Fashion-MNIST as a Determined-style PyTorchTrial: a two-layer MLP on
the idx files of Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist, or the experiment's data.dir).

Hyperparameters: global_batch_size, learning_rate, hidden_units,
momentum, gamma (the StepLR decay per epoch). Data config: dir,
train_examples, validation_examples (slices, for quick runs).
"""
import gzip
import os
import struct

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from determined import pytorch

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path, limit=None):
    """The first `limit` items of a gzip'd idx file of unsigned bytes, as a tensor."""
    with gzip.open(path, "rb") as f:
        zero, dtype, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or dtype != 0x08:
            raise ValueError(f"{path}: not an idx file of unsigned bytes")
        shape = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        if limit is not None:
            shape[0] = min(shape[0], int(limit))
        n = 1
        for d in shape:
            n *= d
        data = f.read(n)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(shape)


def dataset(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), limit)
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), limit)
    x = x.reshape(x.shape[0], -1).float().div_(255.0).sub_(0.2860).div_(0.3530)
    return TensorDataset(x, y.long())


class FashionMNISTTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext):
        self.context = context
        data = context.get_data_config()
        self.data_dir = data.get("dir", DATA_DIR)
        self.train_examples = data.get("train_examples")
        self.validation_examples = data.get("validation_examples")
        hidden = context.get_hparam("hidden_units")
        self.model = context.wrap_model(nn.Sequential(
            nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10)))
        self.optimizer = context.wrap_optimizer(torch.optim.SGD(
            self.model.parameters(), lr=context.get_hparam("learning_rate"),
            momentum=context.get_hparam("momentum")))
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1,
                                            gamma=context.get_hparams().get("gamma", 1.0)),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH)

    def build_training_data_loader(self):
        return pytorch.DataLoader(dataset(self.data_dir, "train", self.train_examples),
                                  batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=True)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(dataset(self.data_dir, "test", self.validation_examples),
                                  batch_size=256)

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "lr": self.scheduler.get_last_lr()[0]}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int):
        x, y = batch
        out = self.model(x)
        return {"validation_loss": F.cross_entropy(out, y),
                "accuracy": (out.argmax(1) == y).float().mean()}
