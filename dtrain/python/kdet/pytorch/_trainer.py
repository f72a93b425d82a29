"""det.pytorch.init() and Trainer: the training loop of a PyTorchTrial.

    with det.pytorch.init() as train_context:
        trial = MyTrial(train_context)
        trainer = det.pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=det.pytorch.Epoch(1),
                    validation_period=det.pytorch.Batch(100))

Lengths are counted in batches: one batch is one step of every rank
together (global_batch_size records); an epoch is records_per_epoch
records when the experiment config sets it, else the batches in this
rank's shard of the training data. Under the controller the searcher's
operations decide how far to train (their unit from KDET_LENGTH_UNIT);
off-cluster fit's max_length does. Each operation ends with a
validation, a checkpoint and op.report_completed. Checkpoints keep the
position in the data (epoch, batch within it, sampler seed) and every
rank's random generators, so a resumed trial trains on the same batches
in the same order as one that was never stopped.
"""
import contextlib
import math
import os
import signal

import kdet.core
from kdet.pytorch._context import (DataLoader, LRScheduler, PyTorchTrialContext, Reducer,
                                   _overrides, _takes_batch_idx, epoch_batches, rng_state,
                                   seed_everything, seeded_generator, set_rng_state,
                                   to_batches)

STATE_FILE = "state_dict.pth"
# The length of an operation "until the code ends it" (a searcher without max_length).
OPEN_LENGTH = 2147483647


def _scalar(v):
    if hasattr(v, "detach"):
        v = v.detach()
        if v.numel() != 1:
            return None
        return float(v.item())
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if hasattr(v, "item") and getattr(v, "size", 0) == 1:
        return float(v.item())
    return None


class _Metrics:
    """Per-name reductions of scalar metrics over batches and ranks (only
    this rank's batches with across=False), plus wrapped MetricReducers."""

    def __init__(self, reducer=Reducer.AVG, across=True, reducers=()):
        self.reducer = reducer
        self.vals = {}
        self.across = across
        self.reducers = list(reducers)

    def _how(self, name):
        r = self.reducer
        if isinstance(r, dict):
            r = r.get(name, Reducer.AVG)
        return Reducer(r)

    def add(self, metrics):
        if not isinstance(metrics, dict):
            raise TypeError(f"train_batch/evaluate_batch must return a dict (or a loss "
                            f"tensor), got {type(metrics).__name__}")
        for k, v in metrics.items():
            x = _scalar(v)
            if x is not None:
                self.vals.setdefault(k, []).append(x)

    def reduce(self, dist):
        """The reduced metrics (a collective: every rank calls it)."""
        mine = {k: (sum(v), len(v), max(v), min(v)) for k, v in self.vals.items()}
        parts = dist.allgather(mine) if self.across else [mine]
        self.vals = {}
        out = {}
        for k in sorted({k for p in parts for k in p}):
            got = [p[k] for p in parts if k in p]
            how = self._how(k)
            if how == Reducer.SUM:
                out[k] = sum(g[0] for g in got)
            elif how == Reducer.MAX:
                out[k] = max(g[2] for g in got)
            elif how == Reducer.MIN:
                out[k] = min(g[3] for g in got)
            else:
                n = sum(g[1] for g in got)
                out[k] = sum(g[0] for g in got) / n if n else math.nan
        out.update(_reduce_wrapped(self.reducers, dist))
        return out


def _reduce_wrapped(reducers, dist):
    """The metrics of wrapped MetricReducers across all ranks; resets them."""
    out = {}
    for name, r in reducers:
        v = r.cross_slot_reduce(dist.allgather(r.per_slot_reduce()))
        r.reset()
        if name is None:
            if not isinstance(v, dict):
                raise TypeError("a reducer wrapped without a name must return a dict of "
                                "metrics")
            out.update(v)
        else:
            out[name] = v
    return out


def _seed_loader(loader, seed):
    """A torch DataLoader's shuffling and its workers' base seed for one
    pass, from seed, when the loader has no generator of its own: the same
    order on every rank and after a resume, and no draw from torch's
    global generator."""
    import torch.utils.data as tud
    own = getattr(loader, "_kdet_own", None)
    if own is None:
        own = (getattr(loader, "generator", False) is None,
               isinstance(getattr(loader, "sampler", None), tud.RandomSampler)
               and loader.sampler.generator is None)
        loader._kdet_own = own
    if own[0]:
        loader.generator = seeded_generator(seed)
    if own[1]:
        loader.sampler.generator = seeded_generator(seed + 1)


class _Shard:
    """This rank's batches of a loader: a det.pytorch.DataLoader through a
    DistributedSampler, a torch DataLoader by striding (batch i goes to
    rank i % size, whole rounds only, so every rank has as many)."""

    def __init__(self, loader, rank, size, seed, whole_rounds):
        self.loader, self.rank, self.size, self.seed = loader, rank, size, seed
        if isinstance(loader, DataLoader):
            self.len = len(loader.get_data_loader(rank, size, seed))
        else:
            n = len(loader)
            self.len = n // size if whole_rounds else len(range(rank, n, size))
        self._whole = whole_rounds

    def epoch(self, e, skip=0):
        """The batches of pass e, from its batch `skip` on."""
        if isinstance(self.loader, DataLoader):
            yield from self.loader.get_data_loader(self.rank, self.size, self.seed, e, skip)
            return
        if self._whole:
            _seed_loader(self.loader, self.seed * 1000003 + e)
        stop = self.len * self.size if self._whole else None
        it = enumerate(self.loader)
        if skip:
            # Read past them with the generators as they were: transforms
            # that draw random numbers must not shift what comes after.
            saved = rng_state()
            for _ in range(skip * self.size):
                next(it, None)
            set_rng_state(saved)
        for i, b in it:
            if stop is not None and i >= stop:
                break
            if i % self.size == self.rank:
                yield b


class Trainer:
    """Runs a PyTorchTrial: Trainer(trial, context).fit(...)."""

    def __init__(self, trial, context):
        if not isinstance(context, PyTorchTrialContext):
            raise TypeError("Trainer(trial, context): context must come from "
                            "det.pytorch.init()")
        self._trial = trial
        self._context = context
        self._core = context._core
        self._dist = context.distributed
        build = getattr(trial, "build_callbacks", None)
        self._callbacks = dict((build() if build else None) or {})
        self.batches = 0
        self.last_uuid = None
        self._saved_at = -1
        self._validated_at = -1
        self._best = None
        self._val_metrics = None
        self._pos = None           # (data pass, batch in it) of the next batch to train
        self._seed = context.get_trial_seed()  # the samplers' (a checkpoint's, once restored)
        self._epoch_len = None
        context._before_step = [cb.on_before_optimizer_step
                                for cb in self._callbacks.values()
                                if hasattr(cb, "on_before_optimizer_step")]

    # helpers ------------------------------------------------------------
    def _cb(self, hook, *args):
        for cb in self._callbacks.values():
            getattr(cb, hook)(*args)

    def _gbs(self):
        return self._context.hparams.get("global_batch_size")

    def _to_batches(self, unit, name):
        """Batch(n), Epoch(n) or a config length {batches|records|epochs: n} in batches."""
        if unit is None:
            return None
        return to_batches(unit, self._gbs(), self._epoch_len, name)

    def _config_period(self, key):
        """The config's min_validation_period / min_checkpoint_period in
        batches; None when unset or 0."""
        v = self._context.get_experiment_config().get(key)
        if not v:
            return None
        return self._to_batches(v, key) or None

    def _searcher_conf(self):
        s = self._context.get_experiment_config().get("searcher") or {}
        metric = os.environ.get("KDET_SEARCHER_METRIC") or s.get("metric") or "validation_loss"
        return metric, bool(s.get("smaller_is_better", True))

    def _op_batches(self, length, fallback):
        """An operation's length (in the searcher's unit) in batches."""
        if length is None or length <= 0 or (length >= OPEN_LENGTH and fallback is not None):
            return fallback  # no length from the searcher: fit's max_length caps training
        unit = self._core.searcher.get_configured_units()
        return to_batches((length, unit), self._gbs(), self._epoch_len, "op.length")

    def _units_done(self):
        """Batches trained, in the searcher's unit (what operations() counts)."""
        unit = self._core.searcher.get_configured_units()
        if unit == kdet.core.Unit.EPOCHS:
            return self.batches // self._epoch_len
        if unit == kdet.core.Unit.RECORDS:
            return self.batches * int(self._context.get_global_batch_size())
        return self.batches

    def _train_metrics(self):
        ctx = self._context
        return _Metrics(across=ctx._average_training_metrics, reducers=ctx._train_reducers)

    # checkpoints --------------------------------------------------------
    def _save(self):
        import torch
        if self._saved_at == self.batches:
            return self.last_uuid
        state = self._context.state_dict()
        state["batches_trained"] = self.batches
        state["callbacks"] = {k: cb.state_dict() for k, cb in self._callbacks.items()}
        state.update(self._position_state())
        self._cb("on_checkpoint_save_start", state)
        uuid = None
        if self._dist.is_chief:
            meta = {"steps_completed": self.batches, "framework": f"torch-{torch.__version__}",
                    "format": "pickle"}
            with self._core.checkpoint.store_path(meta) as (path, uuid):
                torch.save(state, os.path.join(path, STATE_FILE))
                if hasattr(self._trial, "save_extra"):
                    self._trial.save_extra(path)
                self._cb("on_checkpoint_write_end", str(path))
                self._cb("on_checkpoint_end", str(path))
        self.last_uuid = self._dist.broadcast(uuid)
        self._cb("on_checkpoint_upload_end", self.last_uuid)
        self._saved_at = self.batches
        return self.last_uuid

    def _restore(self, uuid):
        import torch
        with self._core.checkpoint.restore_path(uuid) as path:
            state = torch.load(os.path.join(path, STATE_FILE), map_location="cpu")
            self._cb("on_checkpoint_load_start", state)
            self._context.load_state_dict(state)
            for k, s in (state.get("callbacks") or {}).items():
                if k in self._callbacks:
                    self._callbacks[k].load_state_dict(s)
            if hasattr(self._trial, "load_extra"):
                self._trial.load_extra(path)
        self.batches = int(state.get("batches_trained", 0))
        self._load_position(state)
        self._saved_at = self.batches
        self.last_uuid = uuid
        print(f"kdet: restored checkpoint uuid={uuid} batches_trained={self.batches}",
              flush=True)

    def _position_state(self):
        """Where the data stands and every rank's generators (a collective)."""
        e, j = self._pos if self._pos is not None else (0, 0)
        return {"position": {"epoch": e, "batch_in_epoch": j, "sampler_seed": self._seed,
                             "batches_trained": self.batches},
                "rng_states": self._dist.allgather(rng_state())}

    def _load_position(self, state):
        pos = state.get("position")
        if pos:
            self._seed = int(pos["sampler_seed"])
            self._pos = (int(pos["epoch"]), int(pos["batch_in_epoch"]))
        rng = state.get("rng_states")
        if rng:
            r = self._dist.rank
            set_rng_state(rng[r] if len(rng) == self._dist.size else rng[0])

    # validation ---------------------------------------------------------
    def _validate(self, test_mode=False):
        import torch
        trial, ctx, dist = self._trial, self._context, self._dist
        self._cb("on_validation_start")
        for m in ctx.models:
            m.eval()
        for _, r in ctx.reducers:
            r.reset()
        loader = trial.build_validation_data_loader()
        with torch.no_grad():
            if _overrides(trial, "evaluate_full_dataset") and \
                    not _overrides(trial, "evaluate_batch"):
                metrics = None
                if dist.is_chief:
                    if isinstance(loader, DataLoader):
                        loader = loader.get_data_loader()
                    metrics = {k: _scalar(v) if _scalar(v) is not None else v
                               for k, v in trial.evaluate_full_dataset(loader).items()}
                metrics = dist.broadcast(metrics)
            else:
                acc = _Metrics(trial.evaluation_reducer())
                with_idx = _takes_batch_idx(trial.evaluate_batch)
                shard = _Shard(loader, dist.rank, dist.size, ctx.get_trial_seed(), False)
                for i, batch in enumerate(shard.epoch(0)):
                    batch = ctx.to_device(batch)
                    out = (trial.evaluate_batch(batch, batch_idx=i) if with_idx
                           else trial.evaluate_batch(batch))
                    acc.add(out)
                    if test_mode:
                        break
                metrics = acc.reduce(dist)
                metrics.update(_reduce_wrapped(ctx.reducers, dist))
        for m in ctx.models:
            m.train()
        self._core.train.report_validation_metrics(self.batches, metrics)
        self._validated_at = self.batches
        self._val_metrics = metrics
        self._cb("on_validation_end", metrics)
        return metrics

    def _is_best(self, metrics):
        name, smaller = self._searcher_conf()
        v = metrics.get(name)
        if not isinstance(v, (int, float)) or math.isnan(v):
            return False
        if self._best is None or (v < self._best if smaller else v > self._best):
            self._best = v
            return True
        return False

    # the loop -----------------------------------------------------------
    def fit(self, checkpoint_period=None, validation_period=None, max_length=None,
            reporting_period=None, checkpoint_policy="best", latest_checkpoint=None,
            step_zero_validation=False, test_mode=False, profiling_enabled=False):
        """Train: under the controller until the searcher says stop (its
        operations give the lengths; max_length is used when an operation
        has none), off-cluster to max_length (required). Validates every
        validation_period and at the end of each operation, checkpoints
        every checkpoint_period, after validations (checkpoint_policy
        "best": when the searcher's metric improved, "all": always, "none":
        never), at the end of each operation and when preempted. Training
        metrics are reported every reporting_period (default Batch(100))."""
        from kdet.pytorch._context import Batch
        core = self._core
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(f"checkpoint_policy={checkpoint_policy!r}: must be best, all "
                             "or none")
        if core.local and max_length is None and not test_mode:
            raise ValueError("fit(max_length=...) is required off-cluster (no "
                             "KDET_CONTROLLER_URL): e.g. det.pytorch.Epoch(1)")
        if reporting_period is None:
            reporting_period = Batch(100)
        if profiling_enabled:
            core.profiler.on()
        shard = self._prepare()
        max_b = self._to_batches(max_length, "max_length")
        if test_mode:
            max_b = 1
        val_b, ckpt_b = self._periods(validation_period, checkpoint_period)
        rep_b = self._to_batches(reporting_period, "reporting_period")
        check_b = max(1, int(os.environ.get("KDET_PREEMPT_EVERY") or 10))
        try:
            how = self._run(shard, max_b, val_b, ckpt_b, rep_b, check_b, checkpoint_policy,
                            latest_checkpoint, step_zero_validation, test_mode)
        finally:
            core.profiler.off()
        print(f"kdet: trial {how} batches_trained={self.batches}"
              + (f" checkpoint={self.last_uuid}" if self.last_uuid else ""), flush=True)

    def _periods(self, validation_period, checkpoint_period):
        """fit's periods in batches, else the config's min_validation_period
        and min_checkpoint_period (any unit)."""
        val_b = self._to_batches(validation_period, "validation_period")
        ckpt_b = self._to_batches(checkpoint_period, "checkpoint_period")
        if validation_period is None:
            val_b = self._config_period("min_validation_period")
        if checkpoint_period is None:
            ckpt_b = self._config_period("min_checkpoint_period")
        return val_b, ckpt_b

    def _prepare(self):
        """This rank's shard of the training data; sets the epoch length."""
        dist, ctx = self._dist, self._context
        shard = _Shard(self._trial.build_training_data_loader(), dist.rank, dist.size,
                       ctx.get_trial_seed(), True)
        if shard.len < 1:
            raise ValueError("the training data loader yields fewer batches than ranks")
        rpe = ctx.get_experiment_config().get("records_per_epoch")
        self._epoch_len = ctx._epoch_len = epoch_batches(rpe, self._gbs(), shard.len)
        return shard

    def _start_position(self, shard):
        """Where training continues in the data: a restored checkpoint's
        position (its sampler seed too), else from the batches trained."""
        shard.seed = self._seed
        if self._pos is None or self._pos[1] >= shard.len:
            self._pos = divmod(self.batches, shard.len)

    def _run(self, shard, max_b, val_b, ckpt_b, rep_b, check_b, policy, latest_checkpoint=None,
             step_zero_validation=False, test_mode=False):
        """Restore, then train until the searcher (or max_b batches, off-cluster)
        says stop. Returns "stopped" or "preempted". Lengths in batches."""
        core, ctx = self._core, self._context
        uuid = core.latest_checkpoint if not core.local else None
        uuid = uuid or latest_checkpoint or core.latest_checkpoint
        if uuid:
            self._restore(uuid)
        self._start_position(shard)
        if core.local:
            if max_b is not None:
                core.searcher._max_length = max_b
            if core.searcher.get_configured_units() != kdet.core.Unit.BATCHES:
                os.environ["KDET_LENGTH_UNIT"] = "batches"
        self._cb("on_trial_startup", self.batches, uuid)
        try:
            self._cb("on_training_start")
            for m in ctx.models:
                m.train()
            if step_zero_validation and self.batches == 0:
                self._validate(test_mode)
            return self._train(shard, max_b, val_b, ckpt_b, rep_b, check_b, policy, test_mode)
        finally:
            self._cb("on_trial_shutdown")

    def _train(self, shard, max_b, val_b, ckpt_b, rep_b, check_b, policy, test_mode):
        core, dist, ctx, trial = self._core, self._dist, self._context, self._trial
        train = self._train_metrics()
        batch_metrics = []
        epoch_len = self._epoch_len
        it = None
        lap = core.profiler._lap  # timings of the phases; returns at once when not profiling
        for op in core.searcher.operations(completed=self._units_done()):
            target = self._op_batches(op.length, max_b)
            if target is None:
                raise ValueError("the searcher gave no length and fit() has no max_length")
            while self.batches < target:
                core.profiler._batch_start(self.batches, rep_b)
                if it is None:
                    it = self._batches(shard, self.batches)
                batch, epoch_idx = next(it)
                lap("dataloader_next")
                ctx._current_batch = self.batches
                if self.batches % epoch_len == 0:
                    self._cb("on_training_epoch_start", epoch_idx)
                batch = ctx.to_device(batch)
                lap("to_device")
                out = trial.train_batch(batch, epoch_idx, self.batches)
                ctx._end_batch()
                lap("train_batch")
                if hasattr(out, "detach"):
                    out = {"loss": out}
                # One conversion per value (on a GPU each .item() waits for the device).
                scalars = {k: x for k, v in out.items() if (x := _scalar(v)) is not None}
                lap("from_device")
                train.add(scalars)
                batch_metrics.append(scalars)
                self.batches += 1
                for s in ctx.lr_schedulers:
                    if s._step_mode == LRScheduler.StepMode.STEP_EVERY_BATCH and \
                            self.batches % s._frequency == 0:
                        s.step()
                if self.batches % epoch_len == 0:
                    self._cb("on_training_epoch_end", epoch_idx)
                    for s in ctx.lr_schedulers:
                        if s._step_mode == LRScheduler.StepMode.STEP_EVERY_EPOCH and \
                                (epoch_idx + 1) % s._frequency == 0:
                            s.step()
                lap("step_lr_schedulers")
                if self.batches % rep_b == 0 or self.batches == target:
                    avg = train.reduce(dist)
                    lap("reduce_metrics")
                    core.train.report_training_metrics(self.batches, avg)
                    self._cb("on_training_workload_end", avg, batch_metrics)
                    batch_metrics = []
                if val_b and self.batches % val_b == 0 and self.batches < target:
                    m = self._validate(test_mode)
                    if policy == "all" or (policy == "best" and self._is_best(m)):
                        self._save()
                if ckpt_b and self.batches % ckpt_b == 0 and self.batches < target:
                    self._save()
                if self.batches % check_b == 0 or self.batches == target:
                    stop = any(dist.allgather(ctx._stop_requested))
                    if stop or core.preempt.should_preempt():
                        self._save()
                        return "stopped" if stop else "preempted"
            if self._validated_at != self.batches:
                m = self._validate(test_mode)
                if policy == "best":
                    self._is_best(m)
            self._save()
            name, _ = self._searcher_conf()
            op.report_completed((self._val_metrics or {}).get(name))
            if core.preempt.should_preempt():
                return "preempted"
            if op.length >= OPEN_LENGTH and max_b is not None:
                return "stopped"  # fit's max_length ended an operation without a length
        if core.preempt.should_preempt():
            self._save()
            return "preempted"
        return "stopped"

    def _batches(self, shard, skip):
        """(batch, epoch_idx) from the data position self._pos (batch `skip`
        of the training when unknown), pass after pass over the shard;
        epoch_idx counts epochs of self._epoch_len batches."""
        e, j = self._pos if self._pos is not None else divmod(skip, shard.len)
        while True:
            for b in shard.epoch(e, j):
                j += 1
                self._pos = (e, j) if j < shard.len else (e + 1, 0)
                yield b, self.batches // self._epoch_len
            e, j = e + 1, 0


@contextlib.contextmanager
def init(*, hparams=None, exp_conf=None, distributed=None, aggregation_frequency=1,
         enable_tensorboard_logging=True):
    """with det.pytorch.init() as context: a PyTorchTrialContext over a
    kdet.core context (the controller when KDET_CONTROLLER_URL is set, else
    local mode). hparams and exp_conf replace the trial's (off-cluster they
    are the only source besides KDET_HPARAMS). Seeds torch, random and
    numpy with the trial seed; SIGTERM asks the Trainer to checkpoint and
    stop."""
    core = kdet.core.init(distributed=distributed)
    with core:
        if core.distributed.size > 1:
            core.distributed._group()
        seed_everything(core.trial_seed)
        ctx = PyTorchTrialContext(core, hparams=hparams, exp_conf=exp_conf,
                                  aggregation_frequency=aggregation_frequency,
                                  enable_tensorboard_logging=enable_tensorboard_logging)
        old = signal.signal(signal.SIGTERM, lambda *_: core.preempt.signal())
        try:
            yield ctx
        finally:
            signal.signal(signal.SIGTERM, old)
