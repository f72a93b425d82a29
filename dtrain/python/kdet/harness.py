"""python3 -m kdet.harness --trial FILE:CLASS: run a PyTorchTrial under kdet.

Drives the searcher's operations through kdet.core: trains to each
operation's length (in batches), reports averaged training metrics every
--report-every batches and validation metrics at the end of each
operation, checkpoints (state_dicts) after each validation and when the
trial is preempted, and restores $KDET_LATEST_CHECKPOINT at start.
With WORLD_SIZE > 1 it joins torch.distributed (gloo, env://); each rank
trains on every WORLD_SIZE-th batch of the loaders, starting at its rank.
"""
import argparse
import importlib
import importlib.util
import math
import os
import signal
import sys

import kdet.core
from kdet.pytorch import PyTorchTrialContext

STATE_FILE = "state_dict.pth"


def load_trial_class(spec):
    """FILE:CLASS (model_def.py:MyTrial, model_def:MyTrial, pkg.mod:Outer.Trial)."""
    if ":" not in spec:
        raise ValueError(f"--trial {spec!r}: must be FILE:CLASS, e.g. model_def.py:MNistTrial")
    mod_part, cls_part = spec.rsplit(":", 1)
    if mod_part.endswith(".py") or os.sep in mod_part:
        path = os.path.abspath(mod_part if mod_part.endswith(".py") else mod_part + ".py")
        d = os.path.dirname(path)
        if d not in sys.path:
            sys.path.insert(0, d)
        name = os.path.splitext(os.path.basename(path))[0]
        s = importlib.util.spec_from_file_location(name, path)
        if s is None or not os.path.exists(path):
            raise ImportError(f"--trial {spec!r}: no file {path}")
        mod = importlib.util.module_from_spec(s)
        sys.modules[name] = mod
        s.loader.exec_module(mod)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(mod_part)
    obj = mod
    for part in cls_part.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"--trial {spec!r}: {obj.__name__} has no {part!r}")
        obj = getattr(obj, part)
    return obj


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
    return None


class _Mean:
    """Per-name sums and counts of scalar metrics, averaged across ranks."""

    def __init__(self):
        self.sums, self.counts = {}, {}

    def add(self, metrics):
        if not isinstance(metrics, dict):
            raise TypeError(f"train_batch/evaluate_batch must return a dict, got "
                            f"{type(metrics).__name__}")
        for k, v in metrics.items():
            x = _scalar(v)
            if x is None:
                continue
            self.sums[k] = self.sums.get(k, 0.0) + x
            self.counts[k] = self.counts.get(k, 0) + 1

    def reduce(self, dist):
        parts = dist.allgather((self.sums, self.counts))
        sums, counts = {}, {}
        for s, c in parts:
            for k in s:
                sums[k] = sums.get(k, 0.0) + s[k]
                counts[k] = counts.get(k, 0) + c[k]
        self.sums, self.counts = {}, {}
        return {k: (sums[k] / counts[k] if counts[k] else math.nan) for k in sorted(sums)}


def _shard(loader, rank, size):
    for i, batch in enumerate(loader):
        if i % size == rank:
            yield batch


def _train_batches(loader, rank, size, skip):
    """(batch, epoch_idx) forever, this rank's shard, after `skip` batches."""
    epoch, n = 0, 0
    while True:
        got = False
        for batch in _shard(loader, rank, size):
            got = True
            if n >= skip:
                yield batch, epoch
            n += 1
        if not got:
            raise ValueError("the training data loader yields fewer batches than ranks")
        epoch += 1


class Harness:
    def __init__(self, trial_cls, core, report_every=10, preempt_every=10):
        import torch
        self.core = core
        self.dist = core.distributed
        self.report_every = max(1, report_every)
        self.preempt_every = max(1, preempt_every)
        if self.dist.size > 1:
            self.dist._group()
        torch.manual_seed(core.trial_seed)
        self.context = PyTorchTrialContext(core)
        self.trial = trial_cls(self.context)
        self.batches = 0
        self.saved_at = -1
        self.last_uuid = None

    # Checkpoints ---------------------------------------------------------
    def save(self):
        import torch
        if self.saved_at == self.batches:
            return self.last_uuid
        uuid = None
        if self.dist.is_chief:
            meta = {"steps_completed": self.batches, "framework": "torch", "format": "pickle"}
            with self.core.checkpoint.store_path(meta) as (path, uuid):
                state = self.context.state_dict()
                state["batches_trained"] = self.batches
                torch.save(state, os.path.join(path, STATE_FILE))
                if hasattr(self.trial, "save_extra"):
                    self.trial.save_extra(path)
        self.last_uuid = self.dist.broadcast(uuid)
        self.saved_at = self.batches
        return self.last_uuid

    def restore(self, uuid):
        import torch
        with self.core.checkpoint.restore_path(uuid) as path:
            state = torch.load(os.path.join(path, STATE_FILE), map_location="cpu")
            self.context.load_state_dict(state)
            if hasattr(self.trial, "load_extra"):
                self.trial.load_extra(path)
        self.batches = int(state.get("batches_trained", 0))
        self.saved_at = self.batches
        self.last_uuid = uuid
        print(f"kdet: restored checkpoint uuid={uuid} batches_trained={self.batches}",
              flush=True)

    # Training ------------------------------------------------------------
    def validate(self):
        import torch
        for m in self.context.models:
            m.eval()
        mean = _Mean()
        with torch.no_grad():
            for batch in _shard(self.trial.build_validation_data_loader(), self.dist.rank,
                                self.dist.size):
                mean.add(self.trial.evaluate_batch(self.context.to_device(batch)))
        for m in self.context.models:
            m.train()
        return mean.reduce(self.dist)

    def run(self):
        """Train until the searcher says stop or the trial is preempted.
        Returns "stopped" or "preempted"."""
        if self.core.latest_checkpoint:
            self.restore(self.core.latest_checkpoint)
        loader = self.trial.build_training_data_loader()
        it = _train_batches(loader, self.dist.rank, self.dist.size, self.batches)
        train_mean = _Mean()
        for m in self.context.models:
            m.train()
        for op in self.core.searcher.operations(completed=self.batches):
            while self.batches < op.length:
                batch, epoch = next(it)
                metrics = self.trial.train_batch(self.context.to_device(batch), epoch,
                                                 self.batches)
                train_mean.add(metrics)
                self.batches += 1
                if self.batches % self.report_every == 0 or self.batches == op.length:
                    self.core.train.report_training_metrics(self.batches,
                                                            train_mean.reduce(self.dist))
                if self.batches % self.preempt_every == 0 and \
                        self.core.preempt.should_preempt():
                    self.save()
                    return "preempted"
            val = self.validate()
            self.core.train.report_validation_metrics(self.batches, val)
            self.save()
            metric = os.environ.get("KDET_SEARCHER_METRIC")
            op.report_completed(val.get(metric) if metric else None)
            if self.core.preempt.should_preempt():
                return "preempted"
        if self.core.preempt.should_preempt():
            self.save()
            return "preempted"
        return "stopped"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kdet.harness",
                                 description="Run a kdet PyTorchTrial (docs/python.md).")
    ap.add_argument("--trial", required=True, metavar="FILE:CLASS")
    ap.add_argument("--max-length", type=int, default=None,
                    help="local mode: batches of the single operation "
                         "(default $KDET_MAX_LENGTH, else 100)")
    ap.add_argument("--report-every", type=int,
                    default=int(os.environ.get("KDET_REPORT_EVERY", "10")),
                    help="batches between training metric reports (default 10)")
    ap.add_argument("--preempt-every", type=int,
                    default=int(os.environ.get("KDET_PREEMPT_EVERY", "10")),
                    help="batches between preemption checks (default 10)")
    args = ap.parse_args(argv)
    cls = load_trial_class(args.trial)
    with kdet.core.init(max_length=args.max_length) as core:
        signal.signal(signal.SIGTERM, lambda *_: core.preempt.signal())
        h = Harness(cls, core, args.report_every, args.preempt_every)
        how = h.run()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print(f"kdet: trial {how} batches_trained={h.batches}"
              + (f" checkpoint={h.last_uuid}" if h.last_uuid else ""), flush=True)
    if core.distributed.size > 1:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()  # every rank is done with collectives
            # PyTorch 1.13 can deadlock tearing down a gloo process group that
            # DistributedDataParallel holds (~ProcessGroupGloo joins a worker
            # thread that waits for the GIL the destructor holds), at
            # destroy_process_group or at interpreter exit. Everything is
            # reported and checkpointed by now: leave without the teardown.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return 0


def _main():
    try:
        return main()
    except Exception:
        if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
            # See the teardown note in main(): exit without it, with the error.
            import traceback
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        raise


if __name__ == "__main__":
    sys.exit(_main())
