"""A PyTorchTrial: a small MLP on Fashion-MNIST (Debian's dataset-fashion-mnist,
/usr/share/datasets/fashion-mnist), or on synthetic data with the
hyperparameter `synthetic: true` (used by the tests).

    KDET_HPARAMS='{"lr":0.1,"batch_size":64}' PYTHONPATH=dtrain/python \
      /usr/bin/python3 -m kdet.harness --trial dtrain/python/examples/fashion_mnist_trial.py:FashionMNISTTrial --max-length 200
"""
import gzip
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from kdet.pytorch import PyTorchTrial

DATA_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path, limit):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        ndim = magic & 0xFF
        dims = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        n = min(dims[0], limit)
        per = int(np.prod(dims[1:])) if ndim > 1 else 1
        data = np.frombuffer(f.read(n * per), dtype=np.uint8)
    return data.reshape((n,) + tuple(dims[1:]))


def load(split, limit, synthetic, seed):
    if synthetic:
        # Ten fixed "class images" plus noise: learnable in a few dozen batches.
        templates = torch.rand(10, 784, generator=torch.Generator().manual_seed(0))
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 10, (limit,), generator=g)
        x = templates[y] + 0.5 * torch.randn(limit, 784, generator=g)
        return TensorDataset(x, y)
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(DATA_DIR, f"{prefix}-images-idx3-ubyte.gz"), limit)
    y = read_idx(os.path.join(DATA_DIR, f"{prefix}-labels-idx1-ubyte.gz"), limit)
    x = torch.from_numpy(x.reshape(len(x), 784).astype(np.float32) / 255.0)
    return TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


class FashionMNISTTrial(PyTorchTrial):
    def __init__(self, context):
        self.context = context
        hp = context.get_hparams()
        self.synthetic = bool(hp.get("synthetic", False))
        self.batch_size = int(hp.get("batch_size", 64))
        self.n_train = int(hp.get("train_examples", 60000))
        self.n_val = int(hp.get("validation_examples", 10000))
        hidden = int(hp.get("hidden", 64))
        self.model = context.wrap_model(torch.nn.Sequential(
            torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(hp.get("lr", 0.1)),
                            momentum=float(hp.get("momentum", 0.9))))

    def build_training_data_loader(self):
        ds = load("train", self.n_train, self.synthetic, 1)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=True)

    def build_validation_data_loader(self):
        ds = load("test", self.n_val, self.synthetic, 2)
        return DataLoader(ds, batch_size=256)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        out = self.model(x)
        return {"validation_loss": F.cross_entropy(out, y),
                "accuracy": (out.argmax(dim=1) == y).float().mean()}
