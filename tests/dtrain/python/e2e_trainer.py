"""A small det.pytorch.Trainer trial for the end-to-end profiler test: a
linear model on synthetic data, a little slow per batch so that the
profiler's sampler takes a few samples. It passes max_length=Batch(60) to
fit(); the experiment's searcher gives no length, so that is what ends it."""
import time

import torch
from determined import pytorch


class Toy(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(4, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05))

    def _data(self, n):
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, 4, generator=g)
        return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))

    def build_training_data_loader(self):
        return pytorch.DataLoader(self._data(256), batch_size=8)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(self._data(32), batch_size=8)

    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(0.05)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}


if __name__ == "__main__":
    with pytorch.init() as ctx:
        pytorch.Trainer(Toy(ctx), ctx).fit(max_length=pytorch.Batch(60),
                                           reporting_period=pytorch.Batch(20),
                                           validation_period=pytorch.Batch(30))
