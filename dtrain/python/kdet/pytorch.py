"""kdet.pytorch: a small, Determined-like PyTorchTrial API run by kdet.harness.

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
"""


class PyTorchTrial:
    """Subclass it; the harness builds it with a PyTorchTrialContext."""

    def __init__(self, context):
        self.context = context

    def build_training_data_loader(self):
        raise NotImplementedError

    def build_validation_data_loader(self):
        raise NotImplementedError

    def train_batch(self, batch, epoch_idx, batch_idx):
        raise NotImplementedError

    def evaluate_batch(self, batch):
        raise NotImplementedError


class PyTorchTrialContext:
    """What a PyTorchTrial gets: hyperparameters, the distributed context,
    and model/optimizer wrapping (DistributedDataParallel when WORLD_SIZE > 1)."""

    def __init__(self, core, device=None):
        import torch
        self._core = core
        self.distributed = core.distributed
        self.hparams = dict(core.hparams)
        self.models = []
        self.optimizers = []
        self.device = device or torch.device("cpu")

    def get_hparams(self):
        return dict(self.hparams)

    def get_hparam(self, name):
        if name not in self.hparams:
            raise KeyError(f"hyperparameter {name!r} is not set (KDET_HPARAMS has "
                           f"{sorted(self.hparams)})")
        return self.hparams[name]

    def get_experiment_config(self):
        return {}

    def get_trial_seed(self):
        return self._core.trial_seed

    def get_trial_id(self):
        return self._core.trial_id

    def wrap_model(self, model):
        """Move the model to the device; with several ranks, wrap it in
        DistributedDataParallel (gradients averaged across ranks in backward).
        The unwrapped model is what checkpoints hold."""
        import torch
        model = model.to(self.device)
        self.models.append(model)
        if self.distributed.size > 1:
            self.distributed._group()
            return torch.nn.parallel.DistributedDataParallel(model)
        return model

    def wrap_optimizer(self, optimizer):
        self.optimizers.append(optimizer)
        return optimizer

    def to_device(self, data):
        import torch
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, (list, tuple)):
            return type(data)(self.to_device(d) for d in data)
        if isinstance(data, dict):
            return {k: self.to_device(v) for k, v in data.items()}
        return data

    def backward(self, loss):
        loss.backward()

    def step_optimizer(self, optimizer, clip_grads=None):
        if clip_grads is not None:
            params = [p for g in optimizer.param_groups for p in g["params"]]
            clip_grads(params)
        optimizer.step()
        optimizer.zero_grad()

    def state_dict(self):
        return {"models": [m.state_dict() for m in self.models],
                "optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state):
        if len(state["models"]) != len(self.models):
            raise ValueError(f"checkpoint has {len(state['models'])} models, the trial "
                             f"wraps {len(self.models)}")
        for m, s in zip(self.models, state["models"]):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
