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
    """n epochs: records_per_epoch records when the experiment config sets
    it, else n passes over this rank's shard of the training data."""


UNITS = ("batches", "records", "epochs")


def unit_of(length, what="length"):
    """(n, unit) of a length: Batch(n), Epoch(n), a config length
    {"batches"|"records"|"epochs": n} or (n, unit)."""
    if isinstance(length, TrainUnit):
        return length.value, "epochs" if isinstance(length, Epoch) else "batches"
    if isinstance(length, dict) and len(length) == 1:
        (unit, n), = length.items()
    elif isinstance(length, tuple) and len(length) == 2:
        n, unit = length
        unit = getattr(unit, "name", unit)
    else:
        raise TypeError(f"{what}={length!r}: must be det.pytorch.Batch(n) or Epoch(n)")
    unit = str(unit).lower()
    if unit not in UNITS or isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{what}={length!r}: must be one of {{batches|records|epochs: N}} "
                         "with N a non-negative integer")
    return n, unit


def to_batches(length, global_batch_size=None, epoch_len=None, what="length"):
    """A length (see unit_of) in batches, where one batch is one step of
    every rank together (global_batch_size records): records round up, so
    that training to the result covers them; an epoch is epoch_len batches."""
    n, unit = unit_of(length, what)
    if unit == "batches":
        return n
    if unit == "records":
        if not global_batch_size:
            raise ValueError(f"{what}={length!r}: a length in records needs the "
                             "global_batch_size hyperparameter")
        return -(-n // int(global_batch_size))
    if not epoch_len:
        raise ValueError(f"{what}={length!r}: the length of an epoch is not known")
    return n * int(epoch_len)


def epoch_batches(records_per_epoch, global_batch_size, loader_batches):
    """Batches in one epoch: records_per_epoch over the global batch size
    (rounded up) when the config sets records_per_epoch, else the batches of
    one pass over a rank's shard of the training data."""
    if records_per_epoch:
        if not global_batch_size:
            raise ValueError("records_per_epoch needs the global_batch_size hyperparameter")
        return max(1, -(-int(records_per_epoch) // int(global_batch_size)))
    return loader_batches


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


class _FunctionReducer(MetricReducer):
    """wrap_reducer(fn, name): update(value) collects values; the metric is
    fn(the values of all ranks, in rank order)."""

    def __init__(self, fn):
        self.fn = fn
        self.values = []

    def update(self, value):
        self.values.append(value)

    def reset(self):
        self.values = []

    def per_slot_reduce(self):
        return self.values

    def cross_slot_reduce(self, per_slot_metrics):
        return self.fn([v for vals in per_slot_metrics for v in vals])


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
        self._optimizer_steps = 0  # STEP_EVERY_OPTIMIZER_STEP: its optimizer's steps

    def _optimizer_stepped(self, optimizer):
        """STEP_EVERY_OPTIMIZER_STEP: step every `frequency` steps of the
        scheduler's own optimizer (any optimizer when it names none)."""
        if self._step_mode != LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP or \
                getattr(self.scheduler, "optimizer", optimizer) is not optimizer:
            return
        self._optimizer_steps += 1
        if self._optimizer_steps % self._frequency == 0:
            self.step()

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

    def on_before_optimizer_step(self, parameters):
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

    def on_checkpoint_end(self, checkpoint_dir):
        """Deprecated in Determined (use on_checkpoint_write_end); still called."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


def _sampler_class():
    """A DistributedSampler whose pass can start `skip` samples in, so that
    a resumed trial continues an epoch at the batch it stopped at, in the
    same order, without reading the batches before it."""
    import itertools
    import torch.utils.data as tud

    class ResumableSampler(tud.distributed.DistributedSampler):
        def __init__(self, dataset, num_replicas, rank, shuffle, seed, drop_last, skip=0):
            super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                             seed=seed, drop_last=drop_last)
            self.skip = skip

        def __iter__(self):
            return itertools.islice(super().__iter__(), self.skip, None)

        def __len__(self):
            return max(0, self.num_samples - self.skip)

    return ResumableSampler


def seeded_generator(seed):
    """A torch.Generator seeded with seed (taken modulo 2**63)."""
    import torch
    g = torch.Generator()
    g.manual_seed(int(seed) % (2 ** 63))
    return g


class DataLoader:
    """The arguments of a torch DataLoader; the Trainer builds one per
    rank and epoch with a sampler that shards the dataset over the ranks
    (batch_size is the per-slot batch size), shuffles it from the trial
    seed and the epoch (the same order on every rank and after a resume),
    and can start a pass part-way."""

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
        kwargs.pop("generator", None)  # the Trainer's, from the trial seed
        self.kwargs = dict(num_workers=num_workers, collate_fn=collate_fn,
                           pin_memory=pin_memory, timeout=timeout,
                           worker_init_fn=worker_init_fn, **kwargs)

    def get_data_loader(self, rank=0, size=1, seed=0, epoch=0, skip_batches=0):
        """The torch DataLoader of one rank's shard for one epoch, from its
        batch skip_batches on. Neither it nor its workers' seeds draw from
        torch's global generator."""
        import torch.utils.data as tud
        sampler = _sampler_class()(self.dataset, size, rank, self.shuffle, seed,
                                   self.drop_last, skip_batches * self.batch_size)
        sampler.set_epoch(epoch)
        return tud.DataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler,
                              drop_last=self.drop_last,
                              generator=seeded_generator(seed * 1000003 + epoch), **self.kwargs)

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
        self._core = core
        self.distributed = core.distributed
        self.hparams = dict(core.hparams if hparams is None else hparams)
        info = getattr(core, "info", None)
        conf = exp_conf
        if conf is None:
            conf = dict(info.trial.config) if info is not None else {}
        self._exp_conf = dict(conf)
        self._exp_conf.setdefault("hyperparameters", dict(self.hparams))
        opt = self._exp_conf.get("optimizations") or {}
        # init(aggregation_frequency=) wins over the config's optimizations.
        agg = aggregation_frequency
        if agg in (None, 1):
            agg = opt.get("aggregation_frequency", 1)
            agg = 1 if agg is None else agg
        if isinstance(agg, bool) or not isinstance(agg, int) or agg < 1:
            raise ValueError(f"aggregation_frequency={agg!r}: must be a positive integer")
        self._aggregation_frequency = agg
        self._average_aggregated_gradients = bool(opt.get("average_aggregated_gradients", True))
        self._average_training_metrics = bool(opt.get("average_training_metrics", True))
        self._fp16_compression = bool(opt.get("gradient_compression", False))
        self._tensorboard = enable_tensorboard_logging
        self.models = []
        self.optimizers = []
        self.lr_schedulers = []
        self.reducers = []          # (name, reducer) of validation
        self._train_reducers = []   # (name, reducer) of training
        self._scalers = []
        self._stepped_scalers = []
        self._ddp_models = []
        self._hooked = set()
        self._before_step = []      # the Trainer's on_before_optimizer_step callbacks
        self.device = device or default_device(self.distributed)
        self._stop_requested = False
        self._batch = 0
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
        DistributedDataParallel (gradients averaged across ranks in backward;
        fp16-compressed with optimizations.gradient_compression). The
        unwrapped model is what checkpoints hold."""
        import torch
        model = model.to(self.device)
        self.models.append(model)
        if self.distributed.size > 1:
            self.distributed._group()
            ids = [self.device.index] if self.device.type == "cuda" else None
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
            self._ddp_models.append(ddp)
            ddp.require_backward_grad_sync = self._should_communicate_and_update()
            if self._fp16_compression:
                self._compress(ddp)
            return ddp
        return model

    def _compress(self, ddp):
        """fp16 compression of the gradients DDP allreduces (a comm hook)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        if id(ddp) not in self._hooked:
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
            self._hooked.add(id(ddp))

    def wrap_optimizer(self, optimizer, backward_passes_per_step=1, fp16_compression=False,
                       average_aggregated_gradients=None):
        """Register an optimizer (checkpointed; stepped by step_optimizer).
        fp16_compression turns on gradient_compression for the wrapped
        models; average_aggregated_gradients overrides the config's.
        backward_passes_per_step must be 1 or the aggregation frequency."""
        if backward_passes_per_step not in (1, self._aggregation_frequency):
            raise ValueError(f"backward_passes_per_step={backward_passes_per_step}: kdet "
                             "aggregates gradients with optimizations.aggregation_frequency "
                             f"({self._aggregation_frequency}); use that")
        if fp16_compression:
            self._fp16_compression = True
            for m in self._ddp_models:
                self._compress(m)
        if average_aggregated_gradients is not None:
            self._average_aggregated_gradients = bool(average_aggregated_gradients)
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler, step_mode, frequency=1):
        """Register a torch LR scheduler; the Trainer steps it per
        step_mode (LRScheduler.StepMode) every `frequency` batches or
        epochs and keeps it in checkpoints. Returns lr_scheduler."""
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler):
        """Register a torch.cuda.amp.GradScaler: checkpointed, used by
        step_optimizer(..., scaler=scaler), and update()d by the Trainer
        after each batch that stepped an optimizer with it. Scale the loss
        yourself: self.context.backward(scaler.scale(loss)). (Without CUDA
        the GradScaler disables itself and these are no-ops.)"""
        self._scalers.append(scaler)
        return scaler

    def configure_apex_amp(self, *args, **kwargs):
        raise NotImplementedError("configure_apex_amp: NVIDIA apex is not supported by kdet; "
                                  "use torch.autocast and context.wrap_scaler(GradScaler())")

    def wrap_reducer(self, reducer, name=None, for_training=True, for_validation=True):
        """Register a MetricReducer, or a function of the list of values
        given to the returned object's update() (across all ranks). Its
        result is the metric `name` (or, with name None, a dict of metrics
        merged into the others) of each training report (for_training) and
        each validation (for_validation). Returns the reducer to update."""
        if not isinstance(reducer, MetricReducer):
            if not callable(reducer):
                raise TypeError("wrap_reducer: pass a det.pytorch.MetricReducer or a function "
                                "of a list of values")
            reducer = _FunctionReducer(reducer)
        if for_training:
            self._train_reducers.append((name, reducer))
        if for_validation:
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

    # gradients --------------------------------------------------------
    @property
    def _current_batch(self):
        return self._batch

    @_current_batch.setter
    def _current_batch(self, batch):
        """The Trainer sets it before each train_batch: with
        aggregation_frequency > 1, DDP syncs gradients only in the last
        batch of each group (what DDP's no_sync() does, for the forward and
        backward passes of the whole batch)."""
        self._batch = batch
        for m in self._ddp_models:
            m.require_backward_grad_sync = self._should_communicate_and_update()

    def _should_communicate_and_update(self):
        """True on the last batch of each group of aggregation_frequency
        batches: gradients are allreduced and the optimizers step."""
        return (self._batch + 1) % self._aggregation_frequency == 0

    def backward(self, loss, gradient=None, retain_graph=False, create_graph=False):
        """loss.backward() (the gradients of the non-final batches of an
        aggregation group stay local: see _current_batch)."""
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(self, optimizer, clip_grads=None, auto_zero_grads=True, scaler=None):
        """Step the optimizer on the last batch of each group of
        aggregation_frequency batches (a no-op on the others), after
        averaging the aggregated gradients (average_aggregated_gradients),
        unscaling them (scaler) and calling clip_grads(parameters); then
        zero the gradients and step the optimizer's STEP_EVERY_OPTIMIZER_STEP
        schedulers (every `frequency` of its steps)."""
        if not self._should_communicate_and_update():
            return
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if self._aggregation_frequency > 1 and self._average_aggregated_gradients:
            for p in params:
                if p.grad is not None:
                    p.grad.div_(self._aggregation_frequency)
        if scaler is not None and clip_grads is not None:
            scaler.unscale_(optimizer)
        if clip_grads is not None:
            clip_grads(params)
        for hook in self._before_step:
            hook(params)
        if scaler is not None:
            scaler.step(optimizer)
            if not any(s is scaler for s in self._stepped_scalers):
                self._stepped_scalers.append(scaler)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for s in self.lr_schedulers:
            s._optimizer_stepped(optimizer)

    def _end_batch(self):
        """After each train_batch: update the scalers that stepped."""
        for s in self._stepped_scalers:
            s.update()
        self._stepped_scalers = []

    # checkpoints ------------------------------------------------------
    def state_dict(self):
        return {"models": [m.state_dict() for m in self.models],
                "optimizers": [o.state_dict() for o in self.optimizers],
                "lr_schedulers": [s.state_dict() for s in self.lr_schedulers],
                "lr_scheduler_optimizer_steps": [s._optimizer_steps for s in self.lr_schedulers],
                "scalers": [s.state_dict() for s in self._scalers]}

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
        for sch, n in zip(self.lr_schedulers, state.get("lr_scheduler_optimizer_steps", [])):
            sch._optimizer_steps = n
        for sc, s in zip(self._scalers, state.get("scalers", [])):
            if s:
                sc.load_state_dict(s)


def default_device(dist):
    """cuda:LOCAL_RANK when CUDA is available, else the CPU."""
    import torch
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        dev = torch.device("cuda", dist.local_rank % n)
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def rng_state():
    """The state of Python's, numpy's and torch's (CPU and CUDA) generators."""
    import random
    import torch
    st = {"random": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy
        st["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st):
    """Restore what rng_state() returned (parts it lacks are left alone)."""
    import random
    import torch
    if "random" in st:
        random.setstate(st["random"])
    if "torch" in st:
        torch.set_rng_state(st["torch"])
    if "numpy" in st:
        import numpy
        numpy.random.set_state(st["numpy"])
    if "cuda" in st and torch.cuda.is_available() and \
            len(st["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(st["cuda"])


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
