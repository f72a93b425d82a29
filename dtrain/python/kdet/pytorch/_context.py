"""PyTorchTrial, its context and the pieces a trial hands to the Trainer:
LRScheduler, MetricReducer, PyTorchCallback, DataLoader, Batch and Epoch
(in the shape of Determined's determined.pytorch)."""
import enum
import inspect
import os
import typing


class TrainUnit:
    """A length of training: Batch(n) or Epoch(n)."""

    def __init__(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(self).__name__}({value!r}): must be a positive integer")
        self.value = value

    def __eq__(self, other):
        return type(self) is type(other) and self.value == other.value

    def __hash__(self):
        return hash((type(self).__name__, self.value))

    def __repr__(self):
        return f"{type(self).__name__}({self.value})"


class Batch(TrainUnit):
    """n batches (optimizer steps of every rank together)."""


class Epoch(TrainUnit):
    """n passes over this rank's shard of the training data."""


# What batches may be: a tensor, a sequence of tensors or a dict of them.
TorchData = typing.Union[typing.Dict[str, typing.Any], typing.Sequence[typing.Any], typing.Any]


class Reducer(enum.Enum):
    """How per-batch validation metrics become one value."""
    AVG = "avg"
    SUM = "sum"
    MAX = "max"
    MIN = "min"


class MetricReducer:
    """A custom metric over a whole validation pass: update() it from
    evaluate_batch; the Trainer calls reset() before each pass, then
    per_slot_reduce() on each rank and cross_slot_reduce(list of the
    ranks' values) to get the metric."""

    def reset(self):
        raise NotImplementedError

    def per_slot_reduce(self):
        raise NotImplementedError

    def cross_slot_reduce(self, per_slot_metrics):
        raise NotImplementedError


class LRScheduler:
    """A torch learning-rate scheduler and when the Trainer steps it."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler, step_mode, frequency=1):
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise ValueError(f"step_mode={step_mode!r}: must be an LRScheduler.StepMode")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency={frequency!r}: must be a positive integer")
        self.scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def step(self):
        self.scheduler.step()

    def get_last_lr(self):
        return self.scheduler.get_last_lr()

    def state_dict(self):
        return self.scheduler.state_dict()

    def load_state_dict(self, state):
        self.scheduler.load_state_dict(state)


class PyTorchCallback:
    """Hooks the Trainer calls (override what you need)."""

    def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
        pass

    def on_trial_shutdown(self):
        pass

    def on_training_start(self):
        pass

    def on_training_epoch_start(self, epoch_idx):
        pass

    def on_training_epoch_end(self, epoch_idx):
        pass

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        pass

    def on_validation_start(self):
        pass

    def on_validation_end(self, metrics):
        pass

    def on_checkpoint_load_start(self, checkpoint):
        pass

    def on_checkpoint_save_start(self, checkpoint):
        pass

    def on_checkpoint_write_end(self, checkpoint_dir):
        pass

    def on_checkpoint_upload_end(self, uuid):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


class DataLoader:
    """The arguments of a torch DataLoader; the Trainer builds one per
    rank with a DistributedSampler, so each rank reads its own shard
    (batch_size is the per-slot batch size)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, **kwargs):
        if sampler is not None or batch_sampler is not None:
            raise ValueError("det.pytorch.DataLoader: sampler and batch_sampler are not "
                             "supported (the Trainer shards with a DistributedSampler); "
                             "use shuffle, or return a torch DataLoader")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.kwargs = dict(num_workers=num_workers, collate_fn=collate_fn,
                           pin_memory=pin_memory, timeout=timeout,
                           worker_init_fn=worker_init_fn, **kwargs)

    def get_data_loader(self, rank=0, size=1, seed=0, epoch=0):
        """The torch DataLoader of one rank's shard for one epoch."""
        import torch.utils.data as tud
        sampler = tud.distributed.DistributedSampler(
            self.dataset, num_replicas=size, rank=rank, shuffle=self.shuffle, seed=seed,
            drop_last=self.drop_last)
        sampler.set_epoch(epoch)
        return tud.DataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler,
                              drop_last=self.drop_last, **self.kwargs)

    def __len__(self):
        return len(self.get_data_loader())


class PyTorchTrial:
    """Subclass it; the Trainer (or `python3 -m kdet.harness`) builds it
    with a PyTorchTrialContext."""

    def __init__(self, context):
        self.context = context

    def build_training_data_loader(self):
        raise NotImplementedError

    def build_validation_data_loader(self):
        raise NotImplementedError

    def train_batch(self, batch, epoch_idx, batch_idx):
        raise NotImplementedError

    def evaluate_batch(self, batch, batch_idx=None):
        raise NotImplementedError

    def evaluate_full_dataset(self, data_loader):
        raise NotImplementedError

    def evaluation_reducer(self):
        return Reducer.AVG

    def build_callbacks(self):
        return {}

    def get_batch_length(self, batch):
        import torch
        if isinstance(batch, torch.Tensor):
            return batch.shape[0]
        if isinstance(batch, dict):
            return self.get_batch_length(next(iter(batch.values())))
        return self.get_batch_length(batch[0])


def _overrides(trial, name):
    return getattr(type(trial), name, None) is not getattr(PyTorchTrial, name)


def _takes_batch_idx(fn):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "batch_idx" in params or len(params) >= 2


class PyTorchTrialContext:
    """What a PyTorchTrial gets: hyperparameters, the experiment config,
    the distributed context, and model/optimizer/scheduler wrapping
    (DistributedDataParallel when the size is above 1)."""

    def __init__(self, core, device=None, hparams=None, exp_conf=None,
                 aggregation_frequency=1, enable_tensorboard_logging=True):
        import torch
        self._core = core
        self.distributed = core.distributed
        self.hparams = dict(core.hparams if hparams is None else hparams)
        info = getattr(core, "info", None)
        conf = exp_conf
        if conf is None:
            conf = dict(info.trial.config) if info is not None else {}
        self._exp_conf = dict(conf)
        self._exp_conf.setdefault("hyperparameters", dict(self.hparams))
        if int(aggregation_frequency) != 1:
            raise ValueError(f"aggregation_frequency={aggregation_frequency}: kdet supports 1")
        self._tensorboard = enable_tensorboard_logging
        self.models = []
        self.optimizers = []
        self.lr_schedulers = []
        self.reducers = []
        self.device = device or torch.device("cpu")
        self._stop_requested = False
        self._current_batch = 0
        self._epoch_len = None

    # hyperparameters and config ---------------------------------------
    def get_hparams(self):
        return dict(self.hparams)

    def get_hparam(self, name):
        if name not in self.hparams:
            raise KeyError(f"hyperparameter {name!r} is not set (the trial has "
                           f"{sorted(self.hparams)})")
        return self.hparams[name]

    def get_experiment_config(self):
        return self._exp_conf

    def get_data_config(self):
        return dict(self._exp_conf.get("data") or {})

    def get_global_batch_size(self):
        if "global_batch_size" not in self.hparams:
            raise KeyError("hyperparameter 'global_batch_size' is not set: "
                           "get_global_batch_size() and get_per_slot_batch_size() need it")
        return int(self.hparams["global_batch_size"])

    def get_per_slot_batch_size(self):
        g, n = self.get_global_batch_size(), self.distributed.size
        if g < n:
            raise ValueError(f"global_batch_size={g} is smaller than the {n} slots")
        return g // n

    def get_trial_seed(self):
        return self._core.trial_seed

    def get_trial_id(self):
        info = getattr(self._core, "info", None)
        return info.trial.trial_id if info is not None else 0

    def get_experiment_id(self):
        info = getattr(self._core, "info", None)
        return info.trial.experiment_id if info is not None else 0

    def get_enable_tensorboard_logging(self):
        return self._tensorboard

    def get_tensorboard_path(self):
        return self._core.train.get_tensorboard_path()

    def get_stop_requested(self):
        return self._stop_requested

    def set_stop_requested(self, stop_requested):
        """Ask the Trainer to stop after this batch (checkpoint, then exit)."""
        self._stop_requested = bool(stop_requested)

    def current_train_batch(self):
        return self._current_batch

    def current_train_epoch(self):
        return self._current_batch // self._epoch_len if self._epoch_len else 0

    def is_epoch_start(self):
        return bool(self._epoch_len) and self._current_batch % self._epoch_len == 0

    def is_epoch_end(self):
        return bool(self._epoch_len) and (self._current_batch + 1) % self._epoch_len == 0

    # wrapping ---------------------------------------------------------
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

    def wrap_optimizer(self, optimizer, backward_passes_per_step=1, fp16_compression=False,
                       average_aggregated_gradients=True):
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler, step_mode, frequency=1):
        """Register a torch LR scheduler; the Trainer steps it per
        step_mode (LRScheduler.StepMode) every `frequency` batches or
        epochs and keeps it in checkpoints. Returns lr_scheduler."""
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_reducer(self, reducer, name=None, for_training=False, for_validation=True):
        """Register a MetricReducer (or a function of the list of values
        `reducer.update` was given: not supported, pass a MetricReducer).
        Its result is the validation metric `name` (or, when name is
        None, a dict of metrics merged into the others)."""
        if not isinstance(reducer, MetricReducer):
            raise TypeError("wrap_reducer: pass a det.pytorch.MetricReducer")
        if for_training:
            raise ValueError("wrap_reducer(for_training=True) is not supported by kdet")
        self.reducers.append((name, reducer))
        return reducer

    def to_device(self, data):
        import torch
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, (list, tuple)):
            return type(data)(self.to_device(d) for d in data)
        if isinstance(data, dict):
            return {k: self.to_device(v) for k, v in data.items()}
        return data

    def backward(self, loss, gradient=None, retain_graph=False, create_graph=False):
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(self, optimizer, clip_grads=None, auto_zero_grads=True, scaler=None):
        if clip_grads is not None:
            params = [p for g in optimizer.param_groups for p in g["params"]]
            clip_grads(params)
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for s in self.lr_schedulers:
            if s._step_mode == LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
                s.step()

    # checkpoints ------------------------------------------------------
    def state_dict(self):
        return {"models": [m.state_dict() for m in self.models],
                "optimizers": [o.state_dict() for o in self.optimizers],
                "lr_schedulers": [s.state_dict() for s in self.lr_schedulers]}

    def load_state_dict(self, state):
        if len(state["models"]) != len(self.models):
            raise ValueError(f"checkpoint has {len(state['models'])} models, the trial "
                             f"wraps {len(self.models)}")
        for m, s in zip(self.models, state["models"]):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
        for sch, s in zip(self.lr_schedulers, state.get("lr_schedulers", [])):
            sch.load_state_dict(s)


def seed_everything(seed):
    """torch, numpy (when present) and random, from the trial seed."""
    import random
    import torch
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % (2 ** 32))
    except ImportError:
        pass
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
