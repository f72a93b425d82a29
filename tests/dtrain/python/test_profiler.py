#!/usr/bin/python3
"""The profiler of the Python side (kdet/_profiler.py): the /proc parsers
as a table of fixture trees (tests/data/profiler/CASE/{t0,t1}, expect.json),
the NVML binding against a stand-in libnvidia-ml, the sampler thread and
the Trainer's timings (window, periods, nothing when off), the experiment
config turning it on, and the Trainer's timings off-cluster."""
import contextlib
import io
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tk  # noqa: E402
from tk import case, check  # noqa: E402

from kdet import _profiler  # noqa: E402

DATA = os.path.join(tk.SRC, "tests", "data", "profiler")


class Dist:
    def __init__(self, rank=0, local_rank=0, cross_rank=0):
        self.rank, self.local_rank, self.cross_rank = rank, local_rank, cross_rank
        self.is_chief = rank == 0
        self.is_local_chief = local_rank == 0


class Client:
    """Collects what the profiler reports, as libdtrain's client would send it."""

    def __init__(self):
        self.rows, self.flushes = [], 0

    def report(self, kind, steps, metrics):
        assert kind == "profiling"
        json.dumps(metrics)  # must be JSON
        self.rows.append((steps, metrics))

    def flush(self):
        self.flushes += 1


class Core:
    def __init__(self, dist=None):
        self.distributed = dist or Dist()
        self._client = Client()
        self.local = False


@case
def test_proc_fixtures():
    cases = sorted(os.listdir(DATA))
    check(len(cases) >= 3, cases)
    for name in cases:
        with open(os.path.join(DATA, name, "expect.json")) as f:
            want = json.load(f)
        s = _profiler.SystemSampler(root=os.path.join(DATA, name, "t0"))
        check(s.sample(100.0) is None, f"{name}: the first reading gives no sample")
        s.root = os.path.join(DATA, name, "t1")
        got = s.sample(100.0 + want["dt"])
        exp = {k: v for k, v in want["sample"].items() if v is not None}
        check(got == exp, f"{name} ({want['why']}):\n got {got}\nwant {exp}")
        check(s.sample(100.0 + want["dt"]) is None, f"{name}: no time passed, no sample")


@case
def test_parsers_directly():
    check(_profiler.parse_stat("") is None and _profiler.parse_stat("cpu 1 2") is None,
          "no or a short cpu line")
    check(_profiler.parse_stat("cpu0 1 1 1 1\ncpu  1 2 3 4 5 6 7 8 9 10") == (27, 36),
          "the aggregate line only; guest columns not summed")
    check(_profiler.parse_meminfo("MemFree: 1 kB") is None, "no MemTotal")
    check(_profiler.parse_meminfo("MemTotal: 10 kB\nMemAvailable: 20 kB") ==
          {"total": 10240, "available": 10240}, "available is capped at the total")
    check(_profiler.parse_net_dev("    lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16") is None,
          "lo alone is no network")
    check(_profiler.parse_diskstats("garbage") is None, "nothing parsable")
    for part, whole in (("sda1", "sda"), ("nvme0n1p3", "nvme0n1"), ("mmcblk0p1", "mmcblk0"),
                        ("vdb12", "vdb")):
        check(_profiler._is_partition(part, {whole, part}), part)
        check(not _profiler._is_partition(whole, {whole, part}), whole)
    check(not _profiler._is_partition("nvme0n1", {"nvme0n1"}), "a namespace is a disk")


@case
def test_real_proc():
    """On this machine's /proc: a CPU figure in 0..100 and memory; no exception."""
    s = _profiler.SystemSampler()
    s.sample(time.monotonic())
    time.sleep(0.2)
    got = s.sample(time.monotonic())
    check(0 <= got["cpu_util_pct"] <= 100, got)
    check(0 < got["memory_used_bytes"] <= got["memory_total_bytes"], got)


def _fake_nvml():
    d = tk.tmpdir()
    so = os.path.join(d, "libnvidia-ml.so.1")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so,
                    os.path.join(tk.SRC, "tests", "dtrain", "python", "fake_nvml.c")],
                   check=True)
    return so


@case
def test_nvml():
    os.environ["KDET_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    try:
        check(_profiler.open_nvml() is None, "no driver: no NVML, no exception")
    finally:
        del os.environ["KDET_NVML_LIBRARY"]
    so = _fake_nvml()
    n = _profiler.NVML(so)
    got = n.sample()
    n.close()
    check(got == [{"index": 0, "uuid": "GPU-fake-0", "util_pct": 97.0, "memory_util_pct": 48.0,
                   "memory_used_bytes": 12 << 30, "memory_total_bytes": 80 << 30},
                  {"index": 1, "uuid": "GPU-fake-1", "util_pct": 5.0, "memory_util_pct": 2.0,
                   "memory_used_bytes": 1 << 30, "memory_total_bytes": 80 << 30}], got)
    for visible, want in (("1", [1]), ("GPU-fake-0", [0]), ("", [0, 1])):
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
        try:
            n = _profiler.NVML(so)
            check([g["index"] for g in n.sample()] == want, f"CUDA_VISIBLE_DEVICES={visible!r}")
            n.close()
        finally:
            del os.environ["CUDA_VISIBLE_DEVICES"]
    # In a sample, the GPUs ride along with the node's figures.
    s = _profiler.SystemSampler(root=os.path.join(DATA, "basic", "t0"), nvml=_profiler.NVML(so))
    s.sample(0)
    s.root = os.path.join(DATA, "basic", "t1")
    got = s.sample(2)
    s.nvml.close()
    check([g["util_pct"] for g in got["gpus"]] == [97.0, 5.0] and got["cpu_util_pct"] == 30.0,
          got)


@case
def test_sampler_thread():
    core = Core(Dist(cross_rank=0))
    p = _profiler.ProfilerContext(core, config={})
    p._batches = 40
    p.on(sampling_interval=0.05, samples_per_report=3)
    deadline = time.monotonic() + 10
    while len(core._client.rows) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    p.off()
    rows = core._client.rows
    check(len(rows) >= 6 and core._client.flushes >= 2, (len(rows), core._client.flushes))
    steps, m = rows[0]
    check(steps == 40 and m["group"] == "system" and m["node"] == 0 and m["host"] and
          "cpu_util_pct" in m and "memory_used_bytes" in m, m)
    n = len(rows)
    time.sleep(0.2)
    check(len(rows) == n and p._thread is None, "off() stops the thread")
    # Another node's ranks that are not its local chief sample nothing.
    other = Core(Dist(rank=3, local_rank=1, cross_rank=1))
    q = _profiler.ProfilerContext(other, config={})
    q.on(sampling_interval=0.05)
    check(q._thread is None and q.enabled, "not a local chief: no thread")
    q.off()
    with contextlib.suppress(ValueError):
        p.on(sampling_interval=0)
        raise AssertionError("sampling_interval 0 accepted")


@case
def test_timings():
    core = Core()
    p = _profiler.ProfilerContext(core, config={"begin_on_batch": 2, "end_after_batch": 7})
    phases = ("dataloader_next", "to_device", "train_batch")

    def batch(n):
        p._batch_start(n, 4)
        for ph in phases:
            time.sleep(0.001)
            p._lap(ph)

    batch(0)  # off: nothing at all
    check(p._acc == {} and p._acc_batches == 0, p._acc)
    p.on(sampling_interval=60)
    for n in range(0, 12):
        batch(n)
    p.off()
    rows = [(s, m) for s, m in core._client.rows if m["group"] == "timing"]
    # Batches 2..7 timed: 2 and 3 reported at 4, 4..7 at 8; nothing after end_after_batch.
    check([(s, m["batches"]) for s, m in rows] == [(4, 2), (8, 4)], rows)
    for _, m in rows:
        check(set(m) == set(phases) | {"group", "rank", "batches", "time"}, m)
        check(all(0.0005 < m[ph] < 0.5 for ph in phases), m)
    # Timings on other ranks are not recorded.
    q = _profiler.ProfilerContext(Core(Dist(rank=1, local_rank=1)), config={})
    q.enabled = True
    q._batch_start(0, 1)
    q._lap("train_batch")
    check(q._acc == {}, "rank 1 records nothing")


@case
def test_config_turns_it_on():
    """KDET_PROFILING (the controller's, from profiling.enabled) starts the
    profiler with the context; off-cluster its samples are printed."""
    import kdet.core
    env = {"KDET_PROFILING": json.dumps({"enabled": True, "begin_on_batch": 5,
                                         "end_after_batch": 9, "sync_timings": False})}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            with kdet.core.init(max_length=1) as ctx:
                check(ctx.profiler.enabled and ctx.profiler._thread is not None, "started")
                check((ctx.profiler.begin_on_batch, ctx.profiler.end_after_batch,
                       ctx.profiler.sync_timings) == (5, 9, False), "window")
                ctx.profiler.sampling_interval = 0.05
                # The first samples come after the thread's first wait; a
                # busy machine makes that late: wait for them (bounded).
                deadline = time.monotonic() + 15
                while ("kdet: profiling metrics" not in buf.getvalue()
                       and time.monotonic() < deadline):
                    time.sleep(0.1)
            check(ctx.profiler._thread is None, "closed with the context")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = buf.getvalue()
    check('"group": "system"' in out and "kdet: profiling metrics" in out, out[-2000:])
    os.environ["KDET_PROFILING"] = "{not json"
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            p = _profiler.ProfilerContext(None)
        check(not p._conf_enabled and "not JSON" in err.getvalue(), err.getvalue())
    finally:
        del os.environ["KDET_PROFILING"]


@contextlib.contextmanager
def local_env(**kw):
    """os.environ of a local-mode worker for the duration (tk.env + kw)."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(tk.env(**kw))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _toy():
    import torch
    from determined import pytorch

    class Toy(pytorch.PyTorchTrial):
        """y = 2x on 40 points, 8 a batch: 5 batches an epoch."""

        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(1, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

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
            return loss

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}

    return Toy


@case
def test_trainer_timings_off_cluster():
    """det.pytorch.Trainer with profiling_enabled: a timing row per reporting
    period with every phase, the last one at the end of training; without
    it, none."""
    from determined import pytorch
    Toy = _toy()
    for enabled in (True, False):
        d = tk.tmpdir()
        buf = io.StringIO()
        with local_env(KDET_CHECKPOINT_DIR=d), contextlib.redirect_stdout(buf):
            with pytorch.init(hparams={"global_batch_size": 8}) as ctx:
                pytorch.Trainer(Toy(ctx), ctx).fit(max_length=pytorch.Epoch(2),
                                                   reporting_period=pytorch.Batch(4),
                                                   checkpoint_policy="none",
                                                   profiling_enabled=enabled)
        rows = []
        for line in buf.getvalue().splitlines():
            if line.startswith("kdet: profiling metrics steps_completed="):
                steps, _, text = line[len("kdet: profiling metrics steps_completed="):].partition(" ")
                rows.append((int(steps), json.loads(text)))
        timing = [(s, r) for s, r in rows if r.get("group") == "timing"]
        if not enabled:
            check(timing == [], rows)
            continue
        check([(s, r["batches"]) for s, r in timing] == [(4, 4), (8, 4), (10, 2)], timing)
        for _, r in timing:
            for ph in ("dataloader_next", "to_device", "train_batch", "from_device",
                       "step_lr_schedulers", "reduce_metrics"):
                check(isinstance(r.get(ph), float) and r[ph] >= 0, (ph, r))


if __name__ == "__main__":
    tk.main()
