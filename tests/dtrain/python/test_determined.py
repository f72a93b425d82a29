#!/usr/bin/python3
"""Determined's Python API on kdet, off-cluster (local mode), in the way
Determined's tutorials use it: `import determined as det` is kdet; the
Core API contexts; det.get_cluster_info() ids from kdet's trial names;
det.pytorch's Trainer on a slice of Fashion-MNIST and its hooks,
schedulers, reducers and periods; the package found by kdet-launch's
workers without PYTHONPATH."""
import contextlib
import io
import json
import os
import re

import tk
from tk import case, check

STAGED = os.path.join(tk.BUILD, "lib", "python")
TRAINER_EX = os.path.join(tk.SRC, "examples", "pytorch-fashion-mnist", "trainer-api",
                          "train.py")
CORE_EX = os.path.join(tk.SRC, "examples", "core-api-fashion-mnist", "train.py")


local_env = tk.local_env
rows = tk.rows


def expect_error(exc, word, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        check(word in str(e), f"{exc.__name__} does not name {word!r}: {e}")
        return
    check(False, f"{fn.__name__}{args} did not raise {exc.__name__}")


@case
def test_one_implementation_two_names():
    import determined as det
    import determined.core
    import determined.pytorch as dp
    import kdet
    import kdet.core
    import kdet.pytorch
    from determined import core, pytorch
    check(core is kdet.core and determined.core is kdet.core and det.core is kdet.core,
          "determined.core is not kdet.core")
    check(pytorch is kdet.pytorch and dp is kdet.pytorch, "determined.pytorch is not kdet.pytorch")
    check(det.pytorch.Trainer is kdet.pytorch.Trainer, "Trainer differs")
    check(det.get_cluster_info is kdet.get_cluster_info and det.LOG_FORMAT == kdet.LOG_FORMAT,
          "top-level names differ")
    check("%(message)s" in det.LOG_FORMAT, det.LOG_FORMAT)
    for name in ("Batch", "Epoch", "DataLoader", "LRScheduler", "MetricReducer",
                 "PyTorchCallback", "PyTorchTrial", "PyTorchTrialContext", "TorchData", "init"):
        check(hasattr(pytorch, name), f"determined.pytorch.{name} missing")
    for name in ("init", "DistributedContext", "DummyDistributedContext", "PreemptMode",
                 "SearcherMode", "TensorboardMode", "Unit"):
        check(hasattr(core, name), f"determined.core.{name} missing")
    # A fresh interpreter: `import determined as det` alone neither imports
    # torch nor hides det.pytorch; the launch modules resolve.
    code = ("import sys, determined as det; t0 = 'torch' in sys.modules; "
            "p = det.pytorch; import determined.launch.torch_distributed as td; "
            "print(t0, p.__name__, td.__name__)")
    rc, out = tk.run([tk.PY, "-c", code], tk.env(), timeout=60)
    check(rc == 0 and "False kdet.pytorch determined.launch.torch_distributed" in out, out)


@case
def test_cluster_info_ids_from_trial_names():
    from kdet import _info
    table = [  # (KDET_TRIAL_ID, KDET_EXPERIMENT, trial_id)
        ("mnist-3", "mnist", 3),
        ("my-exp-2-14", "my-exp-2", 14),
        ("42", "", 42),
        ("exp-7", "", 7),
    ]
    for trial, exp, want in table:
        got = _info.derive_trial_id(trial, exp)
        check(got == want, f"derive_trial_id({trial!r}, {exp!r}) = {got}, want {want}")
    h = _info.derive_trial_id("no-index-here", "x")
    check(isinstance(h, int) and 0 < h < 2 ** 31 and
          h == _info.derive_trial_id("no-index-here", "x"), f"hash id {h}")
    a = _info.derive_experiment_id("mnist", "team-a")
    check(a == _info.derive_experiment_id("mnist", "team-a") and 0 < a < 2 ** 31, a)
    check(a != _info.derive_experiment_id("mnist", "team-b"), "namespace not in the id")
    check(_info.derive_experiment_id("17") == 17, "numeric experiment")
    check(_info.derive_experiment_id("", None, "mnist-3") == _info.derive_experiment_id("mnist"),
          "experiment from the trial name")

    with local_env():
        import determined as det
        check(det.get_cluster_info() is None, "cluster info off-cluster")
    # A resumed trial: the env the controller gives a trial's pod after a
    # pause (a trial name, the latest checkpoint). Ids are integers, the
    # same in every run, and nothing parses the name as an int.
    code = ("import determined as det, json; i = det.get_cluster_info(); "
            "print(json.dumps([i.trial.trial_id, i.trial.experiment_id, i.trial.hparams, "
            "i.latest_checkpoint, i.task_type, i.container_addrs, i.trial.trial_seed]))")
    env = tk.env(KDET_TRIAL_ID="fmnist-12", KDET_EXPERIMENT="fmnist", KDET_NAMESPACE="ml",
                 KDET_HPARAMS='{"lr": 0.1}', KDET_LATEST_CHECKPOINT="ck-1",
                 KDET_TRIAL_SEED="9", KDET_CHIEF_ADDR="10.0.0.5")
    outs = []
    for _ in range(2):
        rc, out = tk.run([tk.PY, "-c", code], env, timeout=60)
        check(rc == 0, out)
        outs.append(json.loads(out.strip().splitlines()[-1]))
    check(outs[0] == outs[1], f"ids not stable: {outs}")
    tid, eid, hp, latest, ttype, addrs, seed = outs[0]
    check(tid == 12 and eid == _info.derive_experiment_id("fmnist", "ml"), outs[0])
    check(hp == {"lr": 0.1} and latest == "ck-1" and ttype == "TRIAL" and seed == 9, outs[0])
    check(addrs == ["10.0.0.5"], addrs)
    # Under a controller with a database, the store's ids (what `det` shows) win.
    env = tk.env(KDET_TRIAL_ID="fmnist-12", KDET_EXPERIMENT="fmnist", KDET_NAMESPACE="ml",
                 KDET_TRIAL_INT_ID="345", KDET_EXPERIMENT_INT_ID="67")
    rc, out = tk.run([tk.PY, "-c", code], env, timeout=60)
    check(rc == 0, out)
    got = json.loads(out.strip().splitlines()[-1])
    check(got[0] == 345 and got[1] == 67, f"store ids not used: {got}")


@case
def test_core_api_contexts_local():
    import pathlib
    import determined as det
    d = tk.tmpdir()
    buf = io.StringIO()
    with local_env(KDET_CHECKPOINT_DIR=d, KDET_HPARAMS='{"a": 2}'), \
            contextlib.redirect_stdout(buf):
        with det.core.init(max_length=4) as ctx:
            check(ctx.hparams == {"a": 2} and ctx.info is None, "hparams/info")
            check(ctx.distributed.size == 1 and ctx.distributed.is_chief, "distributed")
            check(ctx.searcher.get_configured_units() == det.core.Unit.BATCHES, "units")
            ops = []
            for op in ctx.searcher.operations():
                for step in range(1, op.length + 1):
                    ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
                    op.report_progress(step)
                    ctx.train.report_progress(step / op.length)
                ctx.train.report_validation_metrics(op.length, {"validation_loss": 0.5})
                ctx.train.report_metrics("validation", op.length, {"extra": 1})
                ctx.train.report_metrics("inference", op.length, {"latency": 3})
                expect_error(ValueError, "op.length", op.report_progress, op.length + 1)
                op.report_completed(0.5)
                ops.append(op.length)
            check(ops == [4] and ctx.train.progress == 1.0, f"ops {ops}")
            expect_error(ValueError, "between 0 and 1", ctx.train.report_progress, 1.5)

            with ctx.checkpoint.store_path({"steps_completed": 4}) as (path, sid):
                check(isinstance(path, pathlib.Path), f"store_path gave {type(path)}")
                (path / "sub").mkdir()
                (path / "sub" / "w.bin").write_bytes(bytes(range(256)))
            with ctx.checkpoint.restore_path(sid) as path:
                check(isinstance(path, pathlib.Path), type(path))
                check((path / "sub" / "w.bin").read_bytes() == bytes(range(256)), "restore")
            dl = pathlib.Path(tk.tmpdir()) / "dl"
            ctx.checkpoint.download(sid, dl)
            check((dl / "sub" / "w.bin").read_bytes() == bytes(range(256)), "download")
            src = pathlib.Path(tk.tmpdir())
            (src / "m.txt").write_text("model")
            sid2 = ctx.checkpoint.upload(src, {"steps_completed": 4}, shard=True)
            with ctx.checkpoint.restore_path(sid2) as path:
                check((path / "m.txt").read_text() == "model", "upload")
            check(ctx.checkpoint.get_metadata(sid2)["steps_completed"] == 4, "metadata")
            with ctx.checkpoint.store_path({"steps_completed": 5}, shard=True) as (p, sid3):
                (p / "x").write_text("1")
            check(sid3 not in (sid, sid2), "storage ids repeat")

            check(not ctx.preempt.should_preempt(), "preempted at start")
            ctx.preempt.signal()
            check(ctx.preempt.should_preempt(auto_ack=False) and not ctx.preempt.acknowledged,
                  "auto_ack=False acknowledged")
            ctx.preempt.acknowledge_preemption_signal()
            check(ctx.preempt.acknowledged, "acknowledge")
            ctx.profiler.on(sampling_interval=1, samples_per_report=5)
            check(ctx.profiler.enabled, "profiler on")
            ctx.profiler.off()
            check(not ctx.profiler.enabled, "profiler off")
    text = buf.getvalue()
    check('kdet: training metrics steps_completed=4 {"loss": 0.25}' in text, text)
    check('kdet: validation metrics steps_completed=4 {"extra": 1}' in text, text)
    check('kdet: inference metrics steps_completed=4 {"latency": 3}' in text, text)

    DC = det.core.DistributedContext
    dc = DC(rank=3, size=4, local_rank=1, local_size=2, cross_rank=1, cross_size=2)
    check((dc.get_rank(), dc.get_size(), dc.get_local_rank(), dc.get_local_size(),
           dc.get_cross_rank(), dc.get_cross_size()) == (3, 4, 1, 2, 1, 2), "getters")
    check(not dc.is_chief and not dc.is_local_chief, "chief flags")
    expect_error(ValueError, "rank=4", DC, rank=4, size=4, local_rank=0, local_size=4,
                 cross_rank=0, cross_size=1)
    expect_error(ValueError, "must equal size", DC, rank=0, size=4, local_rank=0,
                 local_size=3, cross_rank=0, cross_size=1)
    one = det.core.DummyDistributedContext()
    check(one.allgather(5) == [5] and one.gather(5) == [5] and one.broadcast(5) == 5,
          "size-1 collectives")
    with local_env():
        expect_error(KeyError, "RANK", DC.from_torch_distributed)
    with local_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2"):
        t = DC.from_torch_distributed()
        check((t.rank, t.size, t.cross_size) == (1, 2, 1), "from_torch_distributed")


@case
def test_core_api_example_hparams_checkpoint_resume():
    d = tk.tmpdir()
    # On the cluster the hyperparameters come from the trial (get_cluster_info).
    env = tk.env(KDET_CHECKPOINT_DIR=d, KDET_TRIAL_ID="core-1", KDET_EXPERIMENT="core",
                 KDET_HPARAMS=json.dumps({"hidden_units": 24, "train_examples": 3200,
                                          "validation_examples": 500}), PYTHONPATH=STAGED)
    rc, out = tk.run([tk.PY, CORE_EX, "--batches", "60", "--report-every", "20"], env,
                     timeout=120)
    check(rc == 0, out)
    check("trial 1 of experiment" in out, out)
    tr = rows(out, "training")
    check([s for s, _ in tr] == [20, 40, 60], tr)
    va = rows(out, "validation")
    check(len(va) == 1 and va[0][0] == 60 and va[0][1]["accuracy"] > 0.5, va)
    m = re.search(r"kdet: checkpoint uuid=(\S+) steps_completed=60", out)
    check(m, out)
    import torch
    state = torch.load(os.path.join(d, m.group(1), "state.pth"))
    check(state["model"]["0.weight"].shape == (24, 784), "hidden_units not from the trial")
    rc, out2 = tk.run([tk.PY, CORE_EX, "--batches", "100", "--report-every", "20"],
                      dict(env, KDET_LATEST_CHECKPOINT=m.group(1)), timeout=120)
    check(rc == 0, out2)
    check(f"resumed from {m.group(1)} at batch 60" in out2, out2)
    check([s for s, _ in rows(out2, "training")] == [80, 100], out2)


@case
def test_trainer_fashion_mnist_local():
    d = tk.tmpdir()
    env = tk.env(KDET_CHECKPOINT_DIR=d, PYTHONPATH=STAGED)
    # 6400 examples at 64 a batch: one epoch is 100 batches.
    rc, out = tk.run([tk.PY, TRAINER_EX, "--epochs", "1", "--train-examples", "6400",
                      "--validation-examples", "1000", "--validation-period", "50"], env,
                     timeout=120)
    check(rc == 0, out)
    tr = rows(out, "training")
    check([s for s, _ in tr] == [100], tr)
    va = rows(out, "validation")
    check([s for s, _ in va] == [50, 100], va)
    check(va[1][1]["validation_loss"] < va[0][1]["validation_loss"] + 0.05, va)
    check(va[1][1]["accuracy"] > 0.65, f"not learning: {va}")
    check(abs(tr[0][1]["lr"] - 0.05) < 1e-9, tr)  # StepLR per epoch: stepped after batch 100
    m = re.search(r"kdet: trial stopped batches_trained=100 checkpoint=(\S+)", out)
    check(m and os.path.exists(os.path.join(d, m.group(1), "state_dict.pth")), out)


def _toy_trial_classes():
    import torch
    from determined import pytorch

    class Events(pytorch.PyTorchCallback):
        def __init__(self):
            self.log = []
            self.restored = None

        def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
            self.log.append(("startup", first_batch_idx, checkpoint_uuid))

        def on_training_start(self):
            self.log.append(("train_start",))

        def on_training_epoch_start(self, epoch_idx):
            self.log.append(("epoch_start", epoch_idx))

        def on_training_epoch_end(self, epoch_idx):
            self.log.append(("epoch_end", epoch_idx))

        def on_training_workload_end(self, avg_metrics, batch_metrics):
            self.log.append(("workload", len(batch_metrics)))

        def on_validation_start(self):
            self.log.append(("val_start",))

        def on_validation_end(self, metrics):
            self.log.append(("val_end", round(metrics["sum_x"], 3)))

        def on_checkpoint_save_start(self, checkpoint):
            self.log.append(("save", checkpoint["batches_trained"]))

        def on_checkpoint_upload_end(self, uuid):
            self.log.append(("uploaded",))

        def on_checkpoint_load_start(self, checkpoint):
            self.log.append(("load", checkpoint["batches_trained"]))

        def on_trial_shutdown(self):
            self.log.append(("shutdown",))

        def state_dict(self):
            return {"n": len(self.log)}

        def load_state_dict(self, state):
            self.restored = state

    class Count(pytorch.MetricReducer):
        def __init__(self):
            self.n = 0

        def reset(self):
            self.n = 0

        def update(self, k):
            self.n += k

        def per_slot_reduce(self):
            return self.n

        def cross_slot_reduce(self, per_slot):
            return sum(per_slot)

    class Toy(pytorch.PyTorchTrial):
        """y = 2x on 40 points, 8 a batch: 5 batches an epoch."""

        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(1, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(),
                                                              lr=context.get_hparam("lr")))
            self.every_batch = context.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5),
                pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH, frequency=2)
            self.count = context.wrap_reducer(Count(), name="seen", for_training=False)
            self.events = Events()

        def build_callbacks(self):
            return {"events": self.events}

        def _data(self, n):
            x = torch.arange(n, dtype=torch.float32).reshape(-1, 1) / n
            return torch.utils.data.TensorDataset(x, 2 * x)

        def build_training_data_loader(self):
            return pytorch.DataLoader(self._data(40), batch_size=8)

        def build_validation_data_loader(self):
            return pytorch.DataLoader(self._data(16), batch_size=4)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return loss  # a bare loss tensor is the metric "loss"

        def evaluate_batch(self, batch, batch_idx):
            x, y = batch
            self.count.update(len(x))
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y),
                    "sum_x": x.sum()}

        def evaluation_reducer(self):
            return {"validation_loss": pytorch.Reducer.AVG, "sum_x": pytorch.Reducer.SUM}

    return Toy


@case
def test_trainer_periods_hooks_schedulers_reducers():
    import determined as det
    from determined import pytorch
    Toy = _toy_trial_classes()
    d = tk.tmpdir()
    buf = io.StringIO()
    with local_env(KDET_CHECKPOINT_DIR=d), contextlib.redirect_stdout(buf):
        with pytorch.init(hparams={"lr": 0.5, "global_batch_size": 8}) as ctx:
            check(ctx.get_per_slot_batch_size() == 8 and ctx.get_global_batch_size() == 8,
                  "batch sizes")
            check(ctx.get_hparam("lr") == 0.5 and ctx.get_experiment_config()[
                "hyperparameters"]["lr"] == 0.5 and ctx.get_data_config() == {}, "config")
            trial = Toy(ctx)
            trainer = pytorch.Trainer(trial, ctx)
            trainer.fit(max_length=pytorch.Epoch(2), validation_period=pytorch.Batch(4),
                        checkpoint_period=pytorch.Batch(3), reporting_period=pytorch.Batch(5),
                        checkpoint_policy="none")
            lr = trial.opt.param_groups[0]["lr"]
            log = list(trial.events.log)
    out = buf.getvalue()
    check([s for s, _ in rows(out, "training")] == [5, 10], out)
    va = rows(out, "validation")
    check([s for s, _ in va] == [4, 8, 10], va)
    # SUM over all 16 points of x = i/16; the reducer counted them.
    check(all(abs(m["sum_x"] - 7.5) < 1e-6 and m["seen"] == 16 for _, m in va), va)
    check(va[-1][1]["validation_loss"] < va[0][1]["validation_loss"], va)
    check(abs(lr - 0.5 * 0.5 ** 5) < 1e-12, f"STEP_EVERY_BATCH frequency 2 over 10 batches: {lr}")
    saves = [e[1] for e in log if e[0] == "save"]
    check(saves == [3, 6, 9, 10], f"checkpoints at {saves} (policy none: periods + end)")
    check(log[0] == ("startup", 0, None) and log[1] == ("train_start",) and
          log[-1] == ("shutdown",), log)
    check([e for e in log if e[0].startswith("epoch")] ==
          [("epoch_start", 0), ("epoch_end", 0), ("epoch_start", 1), ("epoch_end", 1)], log)
    check([e[1] for e in log if e[0] == "workload"] == [5, 5], log)
    check(log.index(("val_start",)) < log.index(("val_end", 7.5)), log)
    last = re.findall(r"kdet: trial stopped batches_trained=10 checkpoint=(\S+)", out)
    check(len(last) == 1, out)

    # Resume: Epoch(3) from the checkpoint at 10 (latest_checkpoint).
    buf = io.StringIO()
    with local_env(KDET_CHECKPOINT_DIR=d), contextlib.redirect_stdout(buf):
        with pytorch.init(hparams={"lr": 0.5, "global_batch_size": 8}) as ctx:
            trial = Toy(ctx)
            pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Epoch(3),
                                            latest_checkpoint=last[0],
                                            checkpoint_policy="all",
                                            validation_period=pytorch.Batch(12))
            lr2 = trial.opt.param_groups[0]["lr"]
            log2 = trial.events.log
            restored = trial.events.restored
    out2 = buf.getvalue()
    check(f"restored checkpoint uuid={last[0]} batches_trained=10" in out2, out2)
    check(log2[0] == ("load", 10) and ("startup", 10, last[0]) in log2, log2)
    # The callback's state as it was when saved at 10 (before save, uploaded, shutdown).
    check(restored == {"n": len(log) - 3}, f"callback state {restored}")
    check([s for s, _ in rows(out2, "validation")] == [12, 15], out2)
    check([e[1] for e in log2 if e[0] == "save"] == [12, 15], log2)  # policy all
    check(abs(lr2 - 0.5 * 0.5 ** 7) < 1e-12, f"learning rate not continued: {lr2}")

    # Off-cluster fit needs a length; bad arguments are named.
    with local_env(KDET_CHECKPOINT_DIR=d), contextlib.redirect_stdout(io.StringIO()):
        with pytorch.init(hparams={"lr": 0.5}) as ctx:
            tr = pytorch.Trainer(Toy(ctx), ctx)
            expect_error(ValueError, "max_length", tr.fit)
            expect_error(ValueError, "checkpoint_policy", tr.fit, max_length=pytorch.Batch(1),
                         checkpoint_policy="some")
            expect_error(TypeError, "validation_period", tr.fit, max_length=pytorch.Batch(1),
                         validation_period=5)
            expect_error(KeyError, "global_batch_size", ctx.get_per_slot_batch_size)
    expect_error(ValueError, "positive integer", pytorch.Batch, 0)
    expect_error(ValueError, "step_mode", pytorch.LRScheduler, None, "every")
    check(det.pytorch.Epoch(2) == pytorch.Epoch(2) and pytorch.Epoch(2) != pytorch.Batch(2),
          "unit equality")


@case
def test_trainer_epoch_scheduler_and_stop_request():
    import torch
    from determined import pytorch
    Toy = _toy_trial_classes()

    class EpochSched(Toy):
        def __init__(self, context):
            super().__init__(context)
            context.lr_schedulers.clear()
            self.sched = context.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.1),
                pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH)

        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 7:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    buf = io.StringIO()
    with local_env(KDET_CHECKPOINT_DIR=tk.tmpdir(), KDET_PREEMPT_EVERY="1"), \
            contextlib.redirect_stdout(buf):
        with pytorch.init(hparams={"lr": 1.0}) as ctx:
            trial = EpochSched(ctx)
            pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Epoch(4))
            lr = trial.opt.param_groups[0]["lr"]
    out = buf.getvalue()
    check("kdet: trial stopped batches_trained=8" in out, out)
    check(abs(lr - 0.1) < 1e-12, f"one epoch ended before the stop: lr {lr}")


@case
def test_launch_workers_find_the_package():
    # No PYTHONPATH: kdet-launch adds build/lib/python (next to build/bin).
    code = "import determined, kdet.core; print('at', determined.__file__)"
    e = tk.env(PYTHONPATH=None)
    rc, out = tk.run([tk.LAUNCH, "--nproc", "2", tk.PY, "-c", code], e, timeout=60)
    want = os.path.join(STAGED, "determined", "__init__.py")
    check(rc == 0 and f"[rank=0] at {want}" in out and f"[rank=1] at {want}" in out, out)
    # The user's own entries stay first.
    e = tk.env(PYTHONPATH="/opt/mine")
    rc, out = tk.run([tk.LAUNCH, tk.PY, "-c", "import os; print('pp', os.environ['PYTHONPATH'])"],
                     e, timeout=60)
    check(rc == 0 and f"[rank=0] pp /opt/mine:{STAGED}" in out, out)
    # The staged copy is the tree's (make keeps it current).
    for rel in ("kdet/core.py", "kdet/pytorch/_trainer.py", "determined/core/__init__.py"):
        a = open(os.path.join(tk.PYPATH, rel)).read()
        b = open(os.path.join(STAGED, rel)).read()
        check(a == b, f"{rel}: staged copy differs (run make)")


@case
def test_editable_install_in_a_venv():
    # docs/python.md: a venv that sees Debian's torch, then pip install -e
    # (no network: the system's setuptools builds it).
    v = os.path.join(tk.tmpdir(), "venv")
    rc, out = tk.run([tk.PY, "-m", "venv", "--system-site-packages", v], tk.env(), timeout=120)
    check(rc == 0, out)
    e = tk.env(PYTHONPATH=None, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    rc, out = tk.run([os.path.join(v, "bin", "pip"), "install", "--no-build-isolation",
                      "--no-deps", "-e", tk.PYPATH], e, timeout=120)
    check(rc == 0, out)
    rc, out = tk.run([os.path.join(v, "bin", "python"), "-c",
                      "import determined as det; from determined import pytorch; "
                      "print('from', det.__file__, pytorch.Trainer.__name__)"], e, timeout=60,
                     cwd="/")
    want = os.path.join(tk.PYPATH, "determined", "__init__.py")
    check(rc == 0 and f"from {want} Trainer" in out, out)
    check(not os.path.exists(os.path.join(tk.PYPATH, "build")), "pip left build/ in the tree")


@case
def test_torchrun_workaround_decision():
    from kdet.launch import TORCHRUN_STD_FIX, torchrun_env
    fix = {"PET_REDIRECTS": TORCHRUN_STD_FIX, "PET_TEE": TORCHRUN_STD_FIX}
    table = [  # (env, argv, python, torch, want)
        ({}, ["python3", "t.py"], (3, 11), "1.13.0a0+gitunknown", fix),
        ({}, ["python3", "t.py"], (3, 10), "1.13.1", {}),
        ({}, ["python3", "t.py"], (3, 11), "2.1.0", {}),
        ({}, ["python3", "t.py"], (3, 11), None, {}),
        ({"PET_TEE": "1"}, ["t.py"], (3, 12), "1.13.1", {"PET_REDIRECTS": TORCHRUN_STD_FIX}),
        ({}, ["--redirects", "3", "--", "t.py"], (3, 11), "1.13.1",
         {"PET_TEE": TORCHRUN_STD_FIX}),
        ({}, ["t.py", "--tee", "1"], (3, 11), "1.13.1", fix),  # the script's own argument
    ]
    for env, argv, py, torch_v, want in table:
        got = torchrun_env(env, argv, py, torch_v)
        check(got == want, f"torchrun_env({env}, {argv}, {py}, {torch_v}) = {got}, want {want}")


if __name__ == "__main__":
    tk.main()
