#!/usr/bin/python3
"""The PyTorch harness's training loop, off-cluster, with a small
regression trial (harness_trial.py): lengths in batches, records and
epochs (records_per_epoch, the config's periods); a worker SIGKILLed
mid-epoch resumes at the same batch with the same data order and ends
with the same weights, bit for bit, as a run never stopped;
aggregation_frequency accumulates gradients like a larger batch;
gradient clipping, autocast and a wrapped GradScaler; training and
validation reducers; two gloo ranks (aggregation with DDP no_sync, fp16
gradient compression, average_training_metrics) end with equal weights."""
import contextlib
import io
import json
import os
import re

import tk
from tk import case, check

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "harness_trial.py")


def expect_error(exc, word, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        check(word in str(e), f"{exc.__name__} does not name {word!r}: {e}")
        return
    check(False, f"{fn.__name__}{args} did not raise {exc.__name__}")


def fit_here(hp, conf=None, cls=None, init_kw=None, **fit):
    """Train harness_trial.Regress (or cls) in this process, off-cluster:
    (trial, context, what it printed)."""
    import harness_trial
    from determined import pytorch
    buf = io.StringIO()
    with tk.local_env(KDET_CHECKPOINT_DIR=tk.tmpdir()), contextlib.redirect_stdout(buf):
        with pytorch.init(hparams=hp, exp_conf=conf or {}, **(init_kw or {})) as ctx:
            trial = (cls or harness_trial.Regress)(ctx)
            pytorch.Trainer(trial, ctx).fit(**fit)
    return trial, ctx, buf.getvalue()


def weights(trial):
    return {k: v.clone() for k, v in trial.context.models[0].state_dict().items()}


def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def checkpoints(out):
    """{steps_completed: uuid} of the checkpoints local mode printed."""
    return {int(m.group(2)): m.group(1) for m in
            re.finditer(r"kdet: checkpoint uuid=(\S+) steps_completed=(\d+)", out)}


@case
def test_length_conversion_table():
    from determined import pytorch
    from kdet.core import Unit
    from kdet.pytorch._context import epoch_batches, to_batches
    table = [  # (length, global_batch_size, epoch_len, batches)
        (pytorch.Batch(7), None, None, 7),
        (pytorch.Epoch(2), None, 10, 20),
        ({"batches": 5}, None, None, 5),
        ({"records": 64}, 8, None, 8),
        ({"records": 65}, 8, None, 9),     # rounds up: all 65 records are trained
        ({"records": 1}, 64, None, 1),
        ({"epochs": 3}, 8, 7, 21),
        ({"batches": 0}, None, None, 0),   # a period of 0: never
        ((100, Unit.RECORDS), 32, None, 4),
        ((2, Unit.EPOCHS), None, 5, 10),
        ((9, "batches"), None, None, 9),
    ]
    for length, gbs, epoch_len, want in table:
        got = to_batches(length, gbs, epoch_len)
        check(got == want, f"to_batches({length}, {gbs}, {epoch_len}) = {got}, want {want}")
    # One epoch: records_per_epoch over the global batch size (up), else the loader's passes.
    for rpe, gbs, loader, want in [(60000, 64, 469, 938), (80, 8, 5, 10), (0, 8, 5, 5),
                                   (None, None, 12, 12), (3, 8, 5, 1)]:
        got = epoch_batches(rpe, gbs, loader)
        check(got == want, f"epoch_batches({rpe}, {gbs}, {loader}) = {got}, want {want}")
    expect_error(ValueError, "global_batch_size", to_batches, {"records": 10}, None, 5)
    expect_error(ValueError, "epoch", to_batches, {"epochs": 1}, 8, None)
    expect_error(ValueError, "batches|records|epochs", to_batches, {"seconds": 3}, 8, 5)
    expect_error(ValueError, "batches|records|epochs", to_batches, {"batches": -1})
    expect_error(TypeError, "validation_period", to_batches, 5, what="validation_period")
    expect_error(ValueError, "global_batch_size", epoch_batches, 100, None, 5)


@case
def test_searcher_units_and_records_per_epoch():
    """op.length in each KDET_LENGTH_UNIT to batches and back (what the
    Trainer tells the searcher it completed), records_per_epoch 80 with 8
    records a batch: an epoch is 10 batches though one pass over the 40
    records is 5; the config's periods in records and epochs."""
    import harness_trial
    from determined import pytorch
    hp = {"global_batch_size": 8, "records": 40, "shuffle": True}
    conf = {"records_per_epoch": 80, "min_validation_period": {"records": 48},
            "min_checkpoint_period": {"epochs": 1}}
    with tk.local_env(KDET_CHECKPOINT_DIR=tk.tmpdir()), \
            contextlib.redirect_stdout(io.StringIO()):
        with pytorch.init(hparams=hp, exp_conf=conf) as ctx:
            tr = pytorch.Trainer(harness_trial.Regress(ctx), ctx)
            tr._prepare()
            check(tr._epoch_len == 10 and ctx._epoch_len == 10, tr._epoch_len)
            for unit, length, want in [("batches", 13, 13), ("records", 100, 13),
                                       ("records", 96, 12), ("epochs", 3, 30)]:
                os.environ["KDET_LENGTH_UNIT"] = unit
                got = tr._op_batches(length, None)
                check(got == want, f"{length} {unit} = {got} batches, want {want}")
                tr.batches = got
                check(tr._units_done() >= length, f"{unit}: {got} batches complete "
                      f"{tr._units_done()} < {length}")
                tr.batches = got - 1
                check(tr._units_done() < length, f"{unit}: {got - 1} batches complete it")
            tr.batches = 0
            check(tr._periods(None, None) == (6, 10), tr._periods(None, None))
            check(tr._periods(pytorch.Batch(7), pytorch.Epoch(2)) == (7, 20), "fit's win")

    trial, _, out = fit_here(hp, conf, max_length=pytorch.Epoch(2), checkpoint_policy="none",
                             reporting_period=pytorch.Batch(5))
    check([s for s, _ in tk.rows(out, "training")] == [5, 10, 15, 20], out)
    check([s for s, _ in tk.rows(out, "validation")] == [6, 12, 18, 20], out)
    check(sorted(checkpoints(out)) == [10, 20], out)
    check(trial.callback.epochs == [("start", 0), ("end", 0), ("start", 1), ("end", 1)],
          trial.callback.epochs)
    seen = trial.batches_seen
    check([b for b, _, _ in seen] == list(range(20)), seen)
    check([e for _, e, _ in seen] == [0] * 10 + [1] * 10, "epoch_idx from records_per_epoch")
    passes = [sorted(i for _, _, ids in seen[p:p + 5] for i in ids) for p in range(0, 20, 5)]
    check(all(p == list(range(40)) for p in passes), "a pass is not the whole data set")
    orders = [[i for _, _, ids in seen[p:p + 5] for i in ids] for p in range(0, 20, 5)]
    check(len({tuple(o) for o in orders}) == 4, "every pass should be shuffled anew")


def _run_trial(ckpt, out, log, hp, fit, timeout=120, **kw):
    e = tk.env(KDET_CHECKPOINT_DIR=ckpt, KDET_TEST_OUT=out, KDET_TEST_LOG=log,
               KDET_TEST_HP=json.dumps(hp), KDET_TEST_FIT=json.dumps(fit), **kw)
    return tk.run([tk.PY, TRIAL], e, timeout=timeout)


def _log(path):
    """{batch: (epoch, ids)} of rank 0 in a KDET_TEST_LOG file, and the batches in order."""
    seen, order = {}, []
    for line in open(path):
        r, b, e, ids = line.split(" ", 3)
        if r == "0":
            seen[int(b)] = (int(e), json.loads(ids))
            order.append(int(b))
    return seen, order


@case
def test_sigkill_mid_epoch_resumes_same_batches_same_weights():
    import torch
    fit = {"max_length": {"epochs": 3}, "checkpoint_period": {"batches": 7},
           "reporting_period": {"batches": 10}}
    # dropout, numpy and `random` draws in every batch: resuming must restore
    # every generator, not only the data order.
    for loader in ("det", "torch"):
        hp = {"global_batch_size": 8, "records": 80, "dropout": 0.2, "noise": True,
              "momentum": 0.5, "lr": 0.02, "loader": loader}
        d = tk.tmpdir()
        for sub in ("straight", "killed", "resumed"):
            os.mkdir(os.path.join(d, sub))
        rc, out = _run_trial(os.path.join(d, "straight"), os.path.join(d, "straight"),
                             os.path.join(d, "straight.log"), hp, fit)
        check(rc == 0, out)
        # 80 records, 8 a batch: 10 batches an epoch; killed before batch 17.
        rc, out = _run_trial(os.path.join(d, "killed"), os.path.join(d, "killed"),
                             os.path.join(d, "killed.log"), hp, fit, KDET_TEST_KILL_AT=17)
        check(rc == -9, f"{loader}: the worker was not killed: rc {rc}\n{out}")
        ck = checkpoints(out)
        check(sorted(ck) == [7, 14], f"{loader}: checkpoints {ck}")
        rc, out = _run_trial(os.path.join(d, "killed"), os.path.join(d, "resumed"),
                             os.path.join(d, "resumed.log"), hp,
                             dict(fit, latest_checkpoint=ck[14]))
        check(rc == 0, out)
        check(f"restored checkpoint uuid={ck[14]} batches_trained=14" in out, out)
        check([s for s, _ in tk.rows(out, "training")] == [20, 30], out)

        straight, _ = _log(os.path.join(d, "straight.log"))
        killed, korder = _log(os.path.join(d, "killed.log"))
        resumed, rorder = _log(os.path.join(d, "resumed.log"))
        check(korder == list(range(17)), f"{loader}: killed run trained {korder}")
        check(rorder == list(range(14, 30)), f"{loader}: resumed run trained {rorder}")
        check(resumed[14][0] == 1, f"{loader}: batch 14 is in epoch {resumed[14][0]}")
        for b in range(30):
            got = killed.get(b) if b < 14 else resumed[b]
            check(got == straight[b], f"{loader}: batch {b}: {got} != {straight[b]}")
        # Each epoch is the whole data set, in a new order.
        for e in range(3):
            ids = [i for b in range(10 * e, 10 * e + 10) for i in straight[b][1]]
            check(sorted(ids) == list(range(80)), f"{loader}: epoch {e}")
        check(straight[0][1] != straight[10][1], f"{loader}: epochs not reshuffled")

        a = torch.load(os.path.join(d, "straight", "rank0.pth"))
        b = torch.load(os.path.join(d, "resumed", "rank0.pth"))
        check(all(torch.isfinite(v).all() for v in a.values()), "diverged")
        check(all(torch.equal(a[k], b[k]) for k in a),
              f"{loader}: final weights differ by {max_diff(a, b)}")


@case
def test_aggregation_frequency_accumulates_like_a_larger_batch():
    from determined import pytorch
    hp = {"records": 32, "shuffle": False, "lr": 0.1, "momentum": 0.5}
    # 4 records a batch, gradients of 2 batches per step; against 8 a batch.
    agg, _, out = fit_here(dict(hp, global_batch_size=4),
                           {"optimizations": {"aggregation_frequency": 2}},
                           max_length=pytorch.Batch(8), reporting_period=pytorch.Batch(4))
    big, _, _ = fit_here(dict(hp, global_batch_size=8), max_length=pytorch.Batch(4))
    plain, _, _ = fit_here(dict(hp, global_batch_size=4), max_length=pytorch.Batch(8))
    summed, _, _ = fit_here(dict(hp, global_batch_size=4),
                            {"optimizations": {"average_aggregated_gradients": False}},
                            init_kw={"aggregation_frequency": 2}, max_length=pytorch.Batch(8))
    check(agg.context._aggregation_frequency == 2 and
          summed.context._aggregation_frequency == 2, "aggregation_frequency not taken")
    check((agg.callback.steps, big.callback.steps, plain.callback.steps,
           summed.callback.steps) == (4, 4, 8, 4), "optimizer steps")
    check([s for s, _ in tk.rows(out, "training")] == [4, 8], out)
    wa, wb = weights(agg), weights(big)
    check(max_diff(wa, wb) < 1e-6, f"aggregated 2x4 differs from 8: {max_diff(wa, wb)}")
    check(max_diff(weights(plain), wb) > 1e-3, "stepping every batch should differ")
    check(max_diff(weights(summed), wb) > 1e-3, "summed gradients should differ")
    import kdet.core
    import torch
    from kdet.pytorch import PyTorchTrialContext
    with tk.local_env(KDET_CHECKPOINT_DIR=tk.tmpdir()), kdet.core.init() as core:
        ctx = PyTorchTrialContext(core, hparams={}, aggregation_frequency=2)
        opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
        expect_error(ValueError, "aggregation_frequency", ctx.wrap_optimizer, opt,
                     backward_passes_per_step=3)
        check(ctx.wrap_optimizer(opt, backward_passes_per_step=2) is opt, "accepted")
        expect_error(ValueError, "aggregation_frequency", PyTorchTrialContext, core,
                     hparams={}, exp_conf={"optimizations": {"aggregation_frequency": 0}})


@case
def test_autocast_scaler_and_clipping():
    import torch
    from determined import pytorch
    hp = {"global_batch_size": 8, "records": 80, "amp": True, "clip": 1.0, "lr": 0.05}
    trial, ctx, out = fit_here(hp, max_length=pytorch.Batch(20),
                               reporting_period=pytorch.Batch(10))
    want = torch.float16 if torch.cuda.is_available() else torch.bfloat16
    check(trial.amp_dtype == want, f"autocast gave {trial.amp_dtype}")
    check(trial.clipped == 20 and trial.callback.steps == 20, (trial.clipped, trial.callback.steps))
    tr = tk.rows(out, "training")
    check(len(tr) == 2 and tr[1][1]["loss"] < tr[0][1]["loss"], f"not learning: {tr}")
    check(ctx._scalers == [trial.scaler], "scaler not wrapped")
    st = ctx.state_dict()
    check(len(st["scalers"]) == 1, st.keys())
    ck = checkpoints(out)
    check(sorted(ck) == [20], out)
    # Clipping bites: a tiny norm slows training down.
    slow, _, out2 = fit_here(dict(hp, clip=1e-3), max_length=pytorch.Batch(20),
                             reporting_period=pytorch.Batch(10))
    check(tk.rows(out2, "training")[1][1]["loss"] > tr[1][1]["loss"] + 0.1,
          f"clip_grads had no effect: {tk.rows(out2, 'training')} vs {tr}")
    with tk.local_env(KDET_CHECKPOINT_DIR=tk.tmpdir()):
        with pytorch.init(hparams={}) as ctx:
            expect_error(NotImplementedError, "wrap_scaler", ctx.configure_apex_amp, [], [])


@case
def test_training_and_validation_reducers():
    import harness_trial
    from determined import pytorch

    class Points(pytorch.MetricReducer):
        def __init__(self):
            self.n = 0

        def update(self, n):
            self.n += n

        def reset(self):
            self.n = 0

        def per_slot_reduce(self):
            return self.n

        def cross_slot_reduce(self, per_slot):
            return {"points": sum(per_slot), "slots": len(per_slot)}

    class WithReducers(harness_trial.Regress):
        def __init__(self, context):
            super().__init__(context)
            self.losses = []
            self.max_loss = context.wrap_reducer(max, name="max_loss", for_validation=False)
            self.points = context.wrap_reducer(Points())  # no name: a dict; both kinds

        def train_batch(self, batch, epoch_idx, batch_idx):
            out = super().train_batch(batch, epoch_idx, batch_idx)
            self.losses.append(float(out["loss"]))
            self.max_loss.update(self.losses[-1])
            self.points.update(len(batch[0]))
            return out

        def evaluate_batch(self, batch):
            self.points.update(len(batch[0]))
            return super().evaluate_batch(batch)

    trial, _, out = fit_here({"global_batch_size": 8, "records": 80}, cls=WithReducers,
                             max_length=pytorch.Batch(10), reporting_period=pytorch.Batch(5),
                             validation_period=pytorch.Batch(5))
    tr, va = tk.rows(out, "training"), tk.rows(out, "validation")
    check([s for s, _ in tr] == [5, 10] and [s for s, _ in va] == [5, 10], out)
    for i, (_, m) in enumerate(tr):
        want = max(trial.losses[5 * i:5 * i + 5])
        check(abs(m["max_loss"] - want) < 1e-9, f"max_loss {m} want {want}")
    # Training points counted since the last report only (reset each time);
    # the validation pass resets them first and counts its 32.
    check(tr[0][1]["points"] == 40 and tr[0][1]["slots"] == 1, tr)
    check(all(m["points"] == 32 and "max_loss" not in m for _, m in va), va)
    check(tr[1][1]["points"] == 40, f"reset after the validation at 5: {tr}")
    with tk.local_env(KDET_CHECKPOINT_DIR=tk.tmpdir()):
        with pytorch.init(hparams={}) as ctx:
            expect_error(TypeError, "MetricReducer", ctx.wrap_reducer, 5)


@case
def test_lr_scheduler_step_modes_with_aggregation():
    """16 batches (2 epochs of 8), 2 a step: each optimizer steps 8 times."""
    import harness_trial
    import torch
    from determined import pytorch
    Mode = pytorch.LRScheduler.StepMode

    class Schedules(harness_trial.Regress):
        def __init__(self, context):
            super().__init__(context)
            self.opt_b = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(),
                                                                lr=0.01))

            def sched(opt, mode, freq=1):
                return context.wrap_lr_scheduler(
                    torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9), mode,
                    frequency=freq)
            self.s = {"a_opt_2": sched(self.opt, Mode.STEP_EVERY_OPTIMIZER_STEP, 2),
                      "b_opt_1": sched(self.opt_b, Mode.STEP_EVERY_OPTIMIZER_STEP),
                      "b_batch_3": sched(self.opt_b, Mode.STEP_EVERY_BATCH, 3),
                      "b_epoch_2": sched(self.opt_b, Mode.STEP_EVERY_EPOCH, 2),
                      "b_manual": sched(self.opt_b, Mode.MANUAL_STEP)}

        def train_batch(self, batch, epoch_idx, batch_idx):
            out = super().train_batch(batch, epoch_idx, batch_idx)
            x, y, _ = batch
            self.context.backward(torch.nn.functional.mse_loss(self.model(x), y))
            self.context.step_optimizer(self.opt_b)
            return out

    trial, ctx, _ = fit_here({"global_batch_size": 4, "records": 32}, cls=Schedules,
                             init_kw={"aggregation_frequency": 2},
                             max_length=pytorch.Epoch(2))
    got = {k: v.last_epoch for k, v in trial.s.items()}
    want = {"a_opt_2": 4, "b_opt_1": 8, "b_batch_3": 5, "b_epoch_2": 1, "b_manual": 0}
    check(got == want, f"scheduler steps {got}, want {want}")
    check(ctx.state_dict()["lr_scheduler_optimizer_steps"] == [8, 8, 0, 0, 0],
          ctx.state_dict()["lr_scheduler_optimizer_steps"])


@case
def test_two_ranks_equal_weights_accumulation_fp16_compression():
    import torch
    from determined import pytorch
    hp = {"global_batch_size": 8, "records": 32, "shuffle": False, "lr": 0.1,
          "momentum": 0.5}
    fit = {"max_length": {"batches": 8}, "reporting_period": {"batches": 4}}
    res = {}
    for name, opt in [("plain", {"aggregation_frequency": 2}),
                      ("fp16", {"aggregation_frequency": 2, "gradient_compression": True,
                                "average_training_metrics": False})]:
        d = tk.tmpdir()
        h = dict(hp, count_allreduce=name == "plain")
        e = tk.env(KDET_CHECKPOINT_DIR=d, KDET_TEST_OUT=d, KDET_TEST_HP=json.dumps(h),
                   KDET_TEST_CONF=json.dumps({"optimizations": opt}),
                   KDET_TEST_FIT=json.dumps(fit))
        rc, out = tk.run([tk.LAUNCH, "--nproc", "2", tk.PY, TRIAL], e, timeout=180)
        check(rc == 0, out)
        w = [torch.load(os.path.join(d, f"rank{r}.pth")) for r in (0, 1)]
        info = [json.load(open(os.path.join(d, f"rank{r}.json"))) for r in (0, 1)]
        check(all(torch.equal(w[0][k], w[1][k]) for k in w[0]),
              f"{name}: ranks differ by {max_diff(w[0], w[1])}")
        check([i["steps"] for i in info] == [4, 4], f"{name}: steps {info}")
        tr = [json.loads(m.group(1)) for m in re.finditer(
            r"\[rank=0\] kdet: training metrics steps_completed=\d+ (\{.*\})", out)]
        check(len(tr) == 2 and "[rank=1] kdet: training metrics" not in out, out)
        res[name] = (w[0], info, tr)
    w, info, tr = res["plain"]
    # 8 batches, 2 a step: DDP allreduces (one bucket) at the 4 steps only (no_sync).
    check([i["allreduces"] for i in info] == [4, 4], f"allreduces {info}")
    check(all(m["rank"] == 0.5 for m in tr), f"training metrics not averaged: {tr}")
    # Two ranks of 4 records, 2 batches a step: one rank with 16 a batch.
    one, _, _ = fit_here(dict(hp, global_batch_size=16), max_length=pytorch.Batch(4))
    check(max_diff(w, weights(one)) < 1e-5, f"2 ranks x 2 x 4 vs 16: {max_diff(w, weights(one))}")
    w16, info16, tr16 = res["fp16"]
    check(all(i["hooks"] == ["fp16_compress_hook"] for i in info16), info16)
    check(all(m["rank"] == 0.0 for m in tr16), f"average_training_metrics false: {tr16}")
    diff = max_diff(w16, w)
    check(0 < diff < 1e-2, f"fp16-compressed gradients: weights differ by {diff}")


if __name__ == "__main__":
    tk.main()
