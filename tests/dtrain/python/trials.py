"""PyTorchTrials for the kdet Python tests (tests/dtrain/python)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "dtrain", "python",
                                "examples"))
from fashion_mnist_trial import FashionMNISTTrial  # noqa: E402


class DumpTrial(FashionMNISTTrial):
    """Writes each rank's model weights to $KDET_TEST_OUT/rank{R}-{batches}.pth
    at every validation."""

    def evaluate_batch(self, batch):
        out = os.environ.get("KDET_TEST_OUT")
        if out and not getattr(self, "_dumped", False):
            self._dumped = True
            r = self.context.distributed.rank
            state = {k: v.clone() for k, v in self.context.models[0].state_dict().items()}
            torch.save(state, os.path.join(out, f"rank{r}.pth"))
        return super().evaluate_batch(batch)


class SlowTrial(FashionMNISTTrial):
    """Sleeps $KDET_TEST_SLEEP seconds per batch, so a signal lands mid-operation."""

    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(float(os.environ.get("KDET_TEST_SLEEP", "0.02")))
        return super().train_batch(batch, epoch_idx, batch_idx)


class Outer:
    class Inner(FashionMNISTTrial):
        pass
