"""python3 -m kdet.harness --trial FILE:CLASS: run a PyTorchTrial under kdet.

Drives the searcher's operations through kdet.core with the Trainer's
loop (kdet.pytorch.Trainer): trains to each operation's length, reports
averaged training metrics every --report-every batches and validation
metrics at the end of each operation, checkpoints (state_dicts) after
each validation and when the trial is preempted, and restores
$KDET_LATEST_CHECKPOINT at start. With WORLD_SIZE > 1 it joins
torch.distributed (gloo, env://); each rank trains on every
WORLD_SIZE-th batch of a torch DataLoader, starting at its rank (whole
rounds only), or on its DistributedSampler shard of a
kdet.pytorch.DataLoader.
"""
import argparse
import importlib
import importlib.util
import os
import signal
import sys

import kdet.core
from kdet.pytorch import PyTorchTrialContext, Trainer
from kdet.pytorch._context import seed_everything
from kdet.pytorch._trainer import STATE_FILE

__all__ = ["Harness", "STATE_FILE", "load_trial_class", "main"]


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


LOCAL_REPORT_EVERY = 10


def report_period(config, env):
    """Batches between training metric reports: $KDET_REPORT_EVERY when set, else
    the experiment config's scheduling_unit (as in Determined, whose harness
    reports training metrics once per scheduling unit; its default is 100),
    else LOCAL_REPORT_EVERY (a local run without a config)."""
    v = env.get("KDET_REPORT_EVERY", "")
    if v:
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"KDET_REPORT_EVERY={v!r}: not a whole number of batches")
        if n < 1:
            raise ValueError(f"KDET_REPORT_EVERY={v!r}: must be at least 1")
        return n
    su = (config or {}).get("scheduling_unit")
    if isinstance(su, int) and not isinstance(su, bool) and su >= 1:
        return su
    return LOCAL_REPORT_EVERY


class Harness:
    """A trial class run by the Trainer's loop (kdet.pytorch.Trainer) with
    the harness's settings: training reports every report_every batches
    (default: report_period of the experiment config),
    preemption checks every preempt_every, validation and a checkpoint at
    the end of each searcher operation, and from the experiment config (as
    Determined's harness does) a validation before the first batch with
    perform_initial_validation, validations every min_validation_period and
    checkpoints every min_checkpoint_period."""

    def __init__(self, trial_cls, core, report_every=None, preempt_every=10):
        self.core = core
        self.dist = core.distributed
        self.preempt_every = max(1, preempt_every)
        if self.dist.size > 1:
            self.dist._group()
        seed_everything(core.trial_seed)
        self.context = PyTorchTrialContext(core)
        if report_every is None:
            report_every = report_period(self.context.get_experiment_config(), os.environ)
        self.report_every = max(1, report_every)
        self.trial = trial_cls(self.context)
        self.trainer = Trainer(self.trial, self.context)

    @property
    def batches(self):
        return self.trainer.batches

    @property
    def last_uuid(self):
        return self.trainer.last_uuid

    def save(self):
        return self.trainer._save()

    def restore(self, uuid):
        self.trainer._restore(uuid)

    def run(self):
        """Train until the searcher says stop or the trial is preempted.
        Returns "stopped" or "preempted"."""
        shard = self.trainer._prepare()
        val_b, ckpt_b = self.trainer._periods(None, None)
        first = bool(self.context.get_experiment_config().get("perform_initial_validation"))
        return self.trainer._run(shard, None, val_b, ckpt_b, self.report_every,
                                 self.preempt_every, "none", step_zero_validation=first)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kdet.harness",
                                 description="Run a kdet PyTorchTrial (docs/python.md).")
    ap.add_argument("--trial", required=True, metavar="FILE:CLASS")
    ap.add_argument("--max-length", type=int, default=None,
                    help="local mode: batches of the single operation "
                         "(default $KDET_MAX_LENGTH, else 100)")
    ap.add_argument("--report-every", type=int, default=None,
                    help="batches between training metric reports (default "
                         "$KDET_REPORT_EVERY, else the experiment config's "
                         f"scheduling_unit, else {LOCAL_REPORT_EVERY})")
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
    # With several ranks, core's exit (kdet.core._exit_without_teardown) has
    # armed a leave without the process group's teardown, with the status
    # this script exits with: 0 here, 1 after an exception.
    return 0


if __name__ == "__main__":
    sys.exit(main())
