#!/usr/bin/python3
"""kdet's Python package in local mode (no controller): the harness runs a
PyTorchTrial, prints metrics, writes a checkpoint through libdtrain and
restores it bit-identically; the Core API; trial class loading; the
kdet.launch modules exec kdet-launch."""
import glob
import json
import os
import re

import tk
from tk import case, check

HP = {"synthetic": True, "lr": 0.1, "batch_size": 32, "train_examples": 1024,
      "validation_examples": 256, "hidden": 32}


def harness(args, **kw):
    e = tk.env(KDET_HPARAMS=json.dumps(HP), **kw)
    return tk.run([tk.PY, "-m", "kdet.harness"] + args, e, timeout=120)


def metrics(out, kind):
    rows = []
    for m in re.finditer(rf"kdet: {kind} metrics steps_completed=(\d+) (\{{.*\}})", out):
        rows.append((int(m.group(1)), json.loads(m.group(2))))
    return rows


@case
def test_harness_local_end_to_end():
    d = tk.tmpdir()
    rc, out = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40"],
                      KDET_CHECKPOINT_DIR=d)
    check(rc == 0, f"rc={rc}\n{out}")
    tr = metrics(out, "training")
    check([s for s, _ in tr] == [10, 20, 30, 40], f"training rows {tr}\n{out}")
    check(tr[-1][1]["loss"] < tr[0][1]["loss"], f"loss did not go down: {tr}")
    va = metrics(out, "validation")
    check(len(va) == 1 and va[0][0] == 40, f"validation rows {va}")
    check(set(va[0][1]) == {"validation_loss", "accuracy"}, va)
    check(va[0][1]["accuracy"] > 0.5, f"synthetic task not learnt: {va}")
    m = re.search(r"kdet: trial stopped batches_trained=40 checkpoint=(\S+)", out)
    check(m, out)
    ck = os.path.join(d, m.group(1))
    check(os.path.exists(os.path.join(ck, "kdet-manifest.json")), os.listdir(ck))
    man = json.load(open(os.path.join(ck, "kdet-manifest.json")))
    check(json.dumps(man).count("state_dict.pth") >= 1, man)
    check('"steps_completed": 40' in json.dumps(man), man)

    # Resume from it: continues at batch 40 up to 60.
    rc, out2 = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "60"],
                       KDET_CHECKPOINT_DIR=d, KDET_LATEST_CHECKPOINT=m.group(1))
    check(rc == 0, out2)
    check(f"restored checkpoint uuid={m.group(1)} batches_trained=40" in out2, out2)
    check([s for s, _ in metrics(out2, "training")] == [50, 60], out2)
    # Already at the length: nothing to train, no new checkpoint.
    rc, out3 = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40"],
                       KDET_CHECKPOINT_DIR=d, KDET_LATEST_CHECKPOINT=m.group(1))
    check(rc == 0 and "trial stopped batches_trained=40" in out3, out3)
    check(not metrics(out3, "training"), out3)
    check(len(os.listdir(d)) == 2, os.listdir(d))


@case
def test_harness_config_periods():
    """The experiment config's perform_initial_validation, min_validation_period and
    min_checkpoint_period reach the harness (KDET_EXPERIMENT_CONFIG, as the controller sets
    it, with a trial id): a validation at batch 0, then every 20 batches; a checkpoint every
    15."""
    d = tk.tmpdir()
    conf = {"perform_initial_validation": True, "min_validation_period": {"batches": 20},
            "min_checkpoint_period": {"batches": 15}, "scheduling_unit": 100}
    rc, out = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40"],
                      KDET_CHECKPOINT_DIR=d, KDET_EXPERIMENT_CONFIG=json.dumps(conf),
                      KDET_TRIAL_ID="fields-1")
    check(rc == 0, f"rc={rc}\n{out}")
    va = [s for s, _ in metrics(out, "validation")]
    check(va == [0, 20, 40], f"validation rows {va}\n{out}")
    ck = sorted(int(m.group(1)) for m in
                re.finditer(r"kdet: checkpoint uuid=\S+ steps_completed=(\d+)", out))
    check(ck[:2] == [15, 30] and ck[-1] == 40, f"checkpoints {ck}\n{out}")
    # Without them: one validation, at the end.
    rc, out = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40"],
                      KDET_CHECKPOINT_DIR=tk.tmpdir(), KDET_EXPERIMENT_CONFIG="{}",
                      KDET_TRIAL_ID="fields-1")
    check(rc == 0 and [s for s, _ in metrics(out, "validation")] == [40], out)


@case
def test_report_period():
    """Training metrics are reported once per scheduling_unit of the experiment config (as
    Determined's harness does), unless KDET_REPORT_EVERY or --report-every says otherwise."""
    from kdet.harness import report_period
    table = [
        ({}, {}, 10),
        (None, {}, 10),
        ({"scheduling_unit": 100}, {}, 100),
        ({"scheduling_unit": 15}, {"KDET_REPORT_EVERY": "7"}, 7),
        ({"scheduling_unit": True}, {}, 10),
        ({"scheduling_unit": 0}, {}, 10),
        ({"scheduling_unit": "5"}, {}, 10),
        ({}, {"KDET_REPORT_EVERY": ""}, 10),
    ]
    for conf, env, want in table:
        got = report_period(conf, env)
        check(got == want, f"report_period({conf}, {env}) = {got}, want {want}")
    for bad in ("x", "0", "-3"):
        try:
            report_period({}, {"KDET_REPORT_EVERY": bad})
            check(False, f"KDET_REPORT_EVERY={bad!r} accepted")
        except ValueError as e:
            check("KDET_REPORT_EVERY" in str(e), str(e))
    conf = {"scheduling_unit": 15}
    rc, out = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40"],
                      KDET_CHECKPOINT_DIR=tk.tmpdir(), KDET_EXPERIMENT_CONFIG=json.dumps(conf),
                      KDET_TRIAL_ID="su-1")
    tr = [s for s, _ in metrics(out, "training")]
    check(rc == 0 and tr == [15, 30, 40], f"training rows {tr}\n{out}")
    rc, out = harness(["--trial", tk.EXAMPLE + ":FashionMNISTTrial", "--max-length", "40",
                       "--report-every", "20"],
                      KDET_CHECKPOINT_DIR=tk.tmpdir(), KDET_EXPERIMENT_CONFIG=json.dumps(conf),
                      KDET_TRIAL_ID="su-1")
    tr = [s for s, _ in metrics(out, "training")]
    check(rc == 0 and tr == [20, 40], f"training rows with --report-every 20: {tr}\n{out}")


def _state_equal(a, b, path="state"):
    import torch
    if isinstance(a, torch.Tensor):
        check(isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
              and torch.equal(a, b), f"{path} differs")
    elif isinstance(a, dict):
        check(isinstance(b, dict) and set(a) == set(b), f"{path}: keys differ")
        for k in a:
            _state_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        check(len(a) == len(b), f"{path}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            _state_equal(x, y, f"{path}[{i}]")
    else:
        check(a == b, f"{path}: {a!r} != {b!r}")


def _restore_roundtrip(**extra):
    import copy
    import kdet.core
    from kdet.harness import Harness, load_trial_class
    d = tk.tmpdir()
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(tk.env(KDET_HPARAMS=json.dumps(HP), KDET_CHECKPOINT_DIR=d, **extra))
        cls = load_trial_class(tk.EXAMPLE + ":FashionMNISTTrial")
        with kdet.core.init(max_length=25) as core:
            h = Harness(cls, core, report_every=5)
            check(h.run() == "stopped", "first run")
            before = copy.deepcopy(h.context.state_dict())
            uuid = h.last_uuid
        check(uuid and os.path.isdir(os.path.join(d, uuid)), f"no checkpoint dir for {uuid}")
        os.environ["KDET_TRIAL_SEED"] = "77"  # a different init: restore must overwrite it
        with kdet.core.init(max_length=25) as core:
            h2 = Harness(cls, core)
            h2.restore(uuid)
            check(h2.batches == 25, h2.batches)
            after = h2.context.state_dict()
        _state_equal(before, after)
        check(len(before["optimizers"][0]["state"]) > 0, "optimizer momentum not saved")
        return d, uuid
    finally:
        os.environ.clear()
        os.environ.update(saved)


@case
def test_checkpoint_restore_bit_identical():
    d, uuid = _restore_roundtrip()
    check(os.path.exists(os.path.join(d, uuid, "kdet-manifest.json")), "no manifest")


@case
def test_checkpoint_without_libdtrain():
    import kdet._dtrain as dt
    old = dt._lib
    dt._lib = None
    try:
        d, uuid = _restore_roundtrip(KDET_LIBDTRAIN="/nonexistent/libdtrain.so")
        check(os.path.exists(os.path.join(d, uuid, "kdet-metadata.json")), os.listdir(d))
        check(os.path.exists(os.path.join(d, uuid, "state_dict.pth")), os.listdir(d))
    finally:
        dt._lib = old


@case
def test_core_local_mode():
    import io
    import contextlib
    import kdet.core
    saved = dict(os.environ)
    try:
        os.environ.clear()
        d = tk.tmpdir()
        os.environ.update(tk.env(KDET_HPARAMS='{"a": 1}', KDET_MAX_LENGTH="7",
                                 KDET_CHECKPOINT_DIR=d))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), kdet.core.init() as ctx:
            check(ctx.local and ctx.distributed.rank == 0 and ctx.distributed.size == 1, "dist")
            check(ctx.hparams == {"a": 1}, ctx.hparams)
            ops = []
            for op in ctx.searcher.operations():
                ops.append(op.length)
                ctx.train.report_training_metrics(op.length, {"loss": 0.5})
                ctx.train.report_validation_metrics(op.length, {"validation_loss": 0.25})
                op.report_completed(0.25)
            check(ops == [7], ops)
            check(list(ctx.searcher.operations()) == [], "a second pass yields nothing")
            check(not ctx.preempt.should_preempt(), "preempt")
            with ctx.checkpoint.store_path({"steps_completed": 7}) as (path, uuid):
                with open(os.path.join(path, "w.bin"), "wb") as f:
                    f.write(bytes(range(256)) * 10)
            with ctx.checkpoint.restore_path(uuid) as path:
                check(open(os.path.join(path, "w.bin"), "rb").read() == bytes(range(256)) * 10,
                      "restored bytes differ")
            try:
                ctx.train.report_early_exit("tired")
                check(False, "bad early-exit reason accepted")
            except ValueError:
                pass
            ctx.preempt.signal()
            check(ctx.preempt.should_preempt(), "signal not seen")
        text = buf.getvalue()
        check('kdet: training metrics steps_completed=7 {"loss": 0.5}' in text, text)
        check('kdet: validation metrics steps_completed=7 {"validation_loss": 0.25}' in text, text)
        # An operation not reported completed is an error, not a silent loop.
        with contextlib.redirect_stdout(io.StringIO()), kdet.core.init(max_length=3) as ctx:
            try:
                for op in ctx.searcher.operations():
                    pass
                check(False, "unreported operation accepted")
            except RuntimeError as e:
                check("report_completed" in str(e), e)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@case
def test_trial_class_forms():
    from kdet.harness import load_trial_class
    check(load_trial_class(tk.TRIALS + ":DumpTrial").__name__ == "DumpTrial", "path.py:C")
    check(load_trial_class(tk.TRIALS + ":Outer.Inner").__name__ == "Inner", "dotted")
    cwd = os.getcwd()
    os.chdir(os.path.dirname(tk.EXAMPLE))
    try:
        check(load_trial_class("fashion_mnist_trial:FashionMNISTTrial").__name__ ==
              "FashionMNISTTrial", "module:C")
    finally:
        os.chdir(cwd)
    for bad, word in (("nocolon", "FILE:CLASS"), (tk.TRIALS + ":Nope", "Nope"),
                      ("/nonexistent/x.py:C", "no file")):
        try:
            load_trial_class(bad)
            check(False, f"{bad} accepted")
        except (ValueError, ImportError) as e:
            check(word in str(e), f"{bad}: {e}")
    rc, out = harness(["--trial", tk.TRIALS + ":Nope"])
    check(rc != 0 and "Nope" in out, out)


@case
def test_launch_modules_exec_kdet_launch():
    e = tk.env()
    rc, out = tk.run([tk.PY, "-m", "kdet.launch.native", "--nproc", "2", "--", "/bin/echo",
                      "hi"], e, timeout=60)
    check(rc == 0, out)
    check("[rank=0] hi" in out and "[rank=1] hi" in out, out)
    # torch_distributed: kdet-launch execs torchrun; with no torchrun on PATH it says so (127).
    e2 = tk.env(PATH=os.path.join(tk.BUILD, "bin") + ":/nonexistent")
    rc, out = tk.run([tk.PY, "-m", "kdet.launch.torch_distributed", "--", "/bin/echo", "hi"],
                     e2, timeout=60)
    check(rc == 127 and "torchrun" in out, f"rc={rc}\n{out}")
    # determined.launch-style arguments pass through unchanged: a misspelt option is named.
    rc, out = tk.run([tk.PY, "-m", "kdet.launch.native", "--nrpoc", "2", "x"], e, timeout=60)
    check(rc == 2 and "--nproc" in out, out)
    e3 = tk.env(PATH="/nonexistent")
    rc, out = tk.run([tk.PY, "-m", "kdet.launch.native", "x"], e3, timeout=60)
    check(rc == 127 and "kdet-launch not found" in out, out)


if __name__ == "__main__":
    tk.main()
