"""kdet.pytorch (also importable as determined.pytorch): PyTorchTrial, its
context, and the Trainer that runs it.

    class MyTrial(kdet.pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(Net())
            self.opt = context.wrap_optimizer(torch.optim.SGD(
                self.model.parameters(), lr=context.get_hparam("lr")))
        def build_training_data_loader(self): return DataLoader(...)
        def build_validation_data_loader(self): return DataLoader(...)
        def train_batch(self, batch, epoch_idx, batch_idx):
            loss = ...
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}
        def evaluate_batch(self, batch):
            return {"validation_loss": ...}

    with kdet.pytorch.init() as context:
        kdet.pytorch.Trainer(MyTrial(context), context).fit(
            max_length=kdet.pytorch.Epoch(1))

`python3 -m kdet.harness --trial FILE:CLASS` runs a trial without a script.
"""
from kdet.pytorch._context import (Batch, DataLoader, Epoch, LRScheduler, MetricReducer,
                                   PyTorchCallback, PyTorchTrial, PyTorchTrialContext,
                                   Reducer, TorchData, TrainUnit)
from kdet.pytorch._trainer import Trainer, init

__all__ = ["Batch", "DataLoader", "Epoch", "LRScheduler", "MetricReducer", "PyTorchCallback",
           "PyTorchTrial", "PyTorchTrialContext", "Reducer", "TorchData", "TrainUnit",
           "Trainer", "init"]
