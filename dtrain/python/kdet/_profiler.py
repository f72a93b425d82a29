"""The profiler of the Core API (ctx.profiler) and the Trainer's timings.

System metrics: while the profiler is on, a background thread on each
node's local chief samples the node every `sampling_interval` seconds
from /proc (CPU utilisation, memory, network and disk throughput) and,
when libnvidia-ml can be loaded, each GPU's utilisation and memory
through NVML (ctypes, optional). Every `samples_per_report` samples are
reported as "profiling" metric rows with {"group": "system", ...}.

Timings: det.pytorch.Trainer marks the phases of each batch
(dataloader_next, to_device, train_batch, from_device,
step_lr_schedulers, reduce_metrics) with _lap(); the chief reports each
phase's mean time in seconds once per reporting period as a row with
{"group": "timing", "batches": N, ...}. When the profiler is off, _lap() returns at
once.

The /proc parsers are pure functions of the files' text; SystemSampler
turns two readings into rates.
"""
import ctypes
import json
import os
import socket
import sys
import threading
import time

# ---- /proc parsing (pure) ----------------------------------------------------------------


def parse_stat(text):
    """/proc/stat -> (busy, total) jiffies of the aggregate "cpu" line, or None.
    Idle time is idle + iowait; steal, guest and guest_nice are not summed
    twice (guest time is already part of user)."""
    for line in text.splitlines():
        f = line.split()
        if not f or f[0] != "cpu":
            continue
        try:
            v = [int(x) for x in f[1:]]
        except ValueError:
            return None
        if len(v) < 4:
            return None
        v += [0] * (8 - len(v))
        total = sum(v[:8])  # user nice system idle iowait irq softirq steal
        idle = v[3] + v[4]
        return total - idle, total
    return None


def parse_meminfo(text):
    """/proc/meminfo -> {"total": bytes, "available": bytes} (MemAvailable, or on
    kernels without it MemFree + Buffers + Cached), or None."""
    kb = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        f = rest.split()
        if f and f[0].isdigit():
            kb[name.strip()] = int(f[0])
    if "MemTotal" not in kb:
        return None
    avail = kb.get("MemAvailable")
    if avail is None:
        avail = kb.get("MemFree", 0) + kb.get("Buffers", 0) + kb.get("Cached", 0)
    return {"total": kb["MemTotal"] * 1024, "available": min(avail, kb["MemTotal"]) * 1024}


def parse_net_dev(text):
    """/proc/net/dev -> (received, sent) bytes of every interface but lo, or None."""
    rx = tx = 0
    seen = False
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        name = name.strip()
        f = rest.split()
        if name == "lo" or len(f) < 9:
            continue
        try:
            rx += int(f[0])
            tx += int(f[8])
        except ValueError:
            continue
        seen = True
    return (rx, tx) if seen else None


# Devices that are not disks, or that count the same I/O again (device-mapper, md RAID).
_NOT_DISKS = ("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")


def parse_diskstats(text):
    """/proc/diskstats -> (read, written) bytes of the whole disks (partitions
    and virtual devices left out, so nothing is counted twice), or None."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 10:
            continue
        try:
            rows[f[2]] = (int(f[5]) * 512, int(f[9]) * 512)  # sectors are 512 bytes here
        except ValueError:
            continue
    if not rows:
        return None
    rd = wr = 0
    for name, (r, w) in rows.items():
        if name.startswith(_NOT_DISKS) or _is_partition(name, rows):
            continue
        rd += r
        wr += w
    return rd, wr


def _is_partition(name, names):
    """vda1 of vda, nvme0n1p2 of nvme0n1, mmcblk0p1 of mmcblk0."""
    base = name.rstrip("0123456789")
    if base == name:
        return False
    return base in names or (base.endswith("p") and base[:-1] in names)


# ---- NVML (optional) ----------------------------------------------------------------------


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class NVML:
    """GPU utilisation and memory through libnvidia-ml (dlopen'ed; OSError
    when it is absent or fails to initialise). Only the GPUs this process
    may use are reported when CUDA_VISIBLE_DEVICES lists indices or UUIDs."""

    def __init__(self, path=None):
        lib = ctypes.CDLL(path or os.environ.get("KDET_NVML_LIBRARY") or "libnvidia-ml.so.1")
        self._lib = lib
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        if init() != 0:
            raise OSError("nvmlInit failed")
        count_fn = getattr(lib, "nvmlDeviceGetCount_v2", None) or lib.nvmlDeviceGetCount
        handle_fn = (getattr(lib, "nvmlDeviceGetHandleByIndex_v2", None)
                     or lib.nvmlDeviceGetHandleByIndex)
        n = ctypes.c_uint(0)
        if count_fn(ctypes.byref(n)) != 0:
            self.close()
            raise OSError("nvmlDeviceGetCount failed")
        lib.nvmlDeviceGetUUID.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint]
        lib.nvmlDeviceGetUtilizationRates.argtypes = [ctypes.c_void_p,
                                                      ctypes.POINTER(_Utilization)]
        lib.nvmlDeviceGetMemoryInfo.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Memory)]
        want = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")
                if v.strip()]
        self.devices = []  # (index, uuid, handle)
        for i in range(n.value):
            h = ctypes.c_void_p()
            if handle_fn(ctypes.c_uint(i), ctypes.byref(h)) != 0:
                continue
            buf = ctypes.create_string_buffer(96)
            uuid = buf.value.decode() if lib.nvmlDeviceGetUUID(h, buf, 96) == 0 else ""
            if want and str(i) not in want and uuid not in want:
                continue
            self.devices.append((i, uuid, h))

    def sample(self):
        """[{"index", "uuid", "util_pct", "memory_util_pct", "memory_used_bytes",
        "memory_total_bytes"}] for each GPU that answered."""
        out = []
        for i, uuid, h in self.devices:
            u, m = _Utilization(), _Memory()
            if self._lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u)) != 0 or \
                    self._lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) != 0:
                continue
            out.append({"index": i, "uuid": uuid, "util_pct": float(u.gpu),
                        "memory_util_pct": float(u.memory), "memory_used_bytes": int(m.used),
                        "memory_total_bytes": int(m.total)})
        return out

    def close(self):
        if self._lib is not None:
            getattr(self._lib, "nvmlShutdown", lambda: 0)()
            self._lib = None


def open_nvml():
    """An NVML, or None when there is no NVIDIA driver here (CI, CPU nodes)."""
    try:
        return NVML()
    except (OSError, AttributeError):
        return None


# ---- the sampler -----------------------------------------------------------------------


def _read(root, name):
    try:
        with open(os.path.join(root, name)) as f:
            return f.read()
    except OSError:
        return None


class SystemSampler:
    """Turns two readings of /proc (under `root`) into one sample: rates are
    per second over the time between the readings; a counter that went
    backwards (a reset) gives no rate that time."""

    def __init__(self, root="/proc", nvml=None):
        self.root = root
        self.nvml = nvml
        self._prev = None

    def _reading(self):
        def parsed(name, fn):
            text = _read(self.root, name)
            return fn(text) if text is not None else None
        return {"cpu": parsed("stat", parse_stat), "mem": parsed("meminfo", parse_meminfo),
                "net": parsed("net/dev", parse_net_dev),
                "disk": parsed("diskstats", parse_diskstats)}

    def sample(self, now):
        """The sample since the previous call (a dict of metrics), or None the
        first time (nothing to compare with yet)."""
        cur = self._reading()
        prev, self._prev = self._prev, (now, cur)
        if prev is None:
            return None
        dt = now - prev[0]
        if dt <= 0:
            return None
        p = prev[1]
        out = {}
        if cur["cpu"] and p["cpu"]:
            busy, total = cur["cpu"][0] - p["cpu"][0], cur["cpu"][1] - p["cpu"][1]
            if total > 0 and busy >= 0:
                out["cpu_util_pct"] = round(100.0 * busy / total, 2)
        if cur["mem"]:
            out["memory_total_bytes"] = cur["mem"]["total"]
            out["memory_used_bytes"] = cur["mem"]["total"] - cur["mem"]["available"]
        for key, names in (("net", ("net_recv_bytes_per_s", "net_sent_bytes_per_s")),
                           ("disk", ("disk_read_bytes_per_s", "disk_write_bytes_per_s"))):
            if cur[key] and p[key]:
                for i, name in enumerate(names):
                    d = cur[key][i] - p[key][i]
                    if d >= 0:
                        out[name] = round(d / dt, 1)
        if self.nvml is not None:
            gpus = self.nvml.sample()
            if gpus:
                out["gpus"] = gpus
        return out


# ---- the profiler context -----------------------------------------------------------------


def config_from_env():
    """The experiment's `profiling` section (KDET_PROFILING, set by the
    controller when profiling.enabled is true), or {}."""
    text = os.environ.get("KDET_PROFILING")
    if not text:
        return {}
    try:
        conf = json.loads(text)
    except ValueError:
        print(f"kdet: KDET_PROFILING is not JSON; profiling stays off: {text[:80]!r}",
              file=sys.stderr, flush=True)
        return {}
    return conf if isinstance(conf, dict) else {}


class ProfilerContext:
    """Determined's core_context.profiler: on() starts sampling system
    metrics (and the Trainer's timings), off() stops both. Started by
    itself when the experiment's config has profiling.enabled."""

    def __init__(self, core=None, config=None):
        self._core = core
        conf = config_from_env() if config is None else config
        self.begin_on_batch = int(conf.get("begin_on_batch") or 0)
        end = conf.get("end_after_batch")
        self.end_after_batch = None if end is None else int(end)
        self.sync_timings = conf.get("sync_timings", True) is not False
        self.enabled = False
        self.sampling_interval = 1.0
        self.samples_per_report = 5
        self._thread = None
        self._stop = threading.Event()
        self._client = None
        self._own_client = False
        self._batches = 0
        # timings
        self._started = None  # the batch being timed: batches done when it began
        self._timing = False
        self._t = 0.0
        self._acc = {}
        self._acc_batches = 0
        self._conf_enabled = bool(conf.get("enabled"))

    def _start_from_config(self):
        if self._conf_enabled:
            self.on()

    # -- system metrics --
    def on(self, sampling_interval=1, samples_per_report=5):
        """Start collecting: system metrics every sampling_interval seconds,
        reported samples_per_report at a time; the Trainer's timings."""
        if sampling_interval <= 0 or samples_per_report < 1:
            raise ValueError("sampling_interval must be positive and samples_per_report at "
                             "least 1")
        self.sampling_interval = float(sampling_interval)
        self.samples_per_report = int(samples_per_report)
        self.enabled = True
        dist = getattr(self._core, "distributed", None)
        if self._core is not None and self._thread is None and \
                (dist is None or dist.is_local_chief):
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kdet-profiler", daemon=True)
            self._thread.start()

    def off(self):
        """Stop collecting; what was collected is reported."""
        self.enabled = False
        self._timing = False
        if self._started is not None:  # the last timed batch has completed
            self._report_timings(self._started + 1)
        t, self._thread = self._thread, None
        if t is not None:
            self._stop.set()
            t.join(timeout=max(10.0, 2 * self.sampling_interval))

    def close(self):
        self.off()
        if self._own_client and self._client is not None:
            c, self._client = self._client, None
            c.close()

    def _sender(self):
        """Where samples go: the chief's client; another node's local chief
        opens its own (each pod has the trial's token); None: print."""
        core = self._core
        if core._client is not None:
            return core._client
        if self._client is None and not core.local and not core.distributed.is_chief:
            from kdet import _dtrain
            self._client = _dtrain.Client()
            self._own_client = True
        return self._client

    def _send(self, rows, flush=True):
        """Report rows of (steps, metrics); flush: send them now (the sampler
        thread), else with libdtrain's next batch (the training loop)."""
        core = self._core
        if not rows:
            return
        try:
            client = self._sender()
            if client is None:
                if core.distributed.is_chief:
                    for steps, m in rows:
                        print(f"kdet: profiling metrics steps_completed={steps} "
                              f"{json.dumps(m, sort_keys=True)}", flush=True)
                return
            for steps, m in rows:
                client.report("profiling", steps, m)
            if flush:
                client.flush()
        except Exception as e:  # profiling must never take training down
            print(f"kdet: profiler: could not report {len(rows)} samples: {e}",
                  file=sys.stderr, flush=True)

    def _run(self):
        dist = self._core.distributed
        sampler = SystemSampler(nvml=open_nvml())
        host = socket.gethostname()
        rows = []
        try:
            sampler.sample(time.monotonic())
            while not self._stop.wait(self.sampling_interval):
                s = sampler.sample(time.monotonic())
                if s is None:
                    continue
                s.update({"group": "system", "node": dist.cross_rank, "host": host,
                          "time": time.time()})
                rows.append((self._batches, s))
                if len(rows) >= self.samples_per_report:
                    self._send(rows)
                    rows = []
            self._send(rows)
        finally:
            if sampler.nvml is not None:
                sampler.nvml.close()

    # -- timings (the Trainer) --
    def _batch_start(self, batches, every):
        """A batch begins with `batches` done; times it when on, within
        begin_on_batch..end_after_batch, on the chief. Reports the timings
        of the past `every` batches at each multiple of `every`."""
        self._batches = batches
        if self._acc_batches and batches % max(1, every) == 0:
            self._report_timings(batches)
        end = self.end_after_batch
        self._timing = (self.enabled and batches >= self.begin_on_batch and
                        (end is None or batches <= end) and
                        (self._core is None or self._core.distributed.is_chief))
        if self._timing:
            self._acc_batches += 1
            self._started = batches
            self._t = self._now()

    def _now(self):
        if self.sync_timings:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        return time.perf_counter()

    def _lap(self, name):
        """The time since the previous mark goes to phase `name`."""
        if not self._timing:
            return
        t = self._now()
        a = self._acc.get(name)
        if a is None:
            self._acc[name] = [t - self._t, 1]
        else:
            a[0] += t - self._t
            a[1] += 1
        self._t = t

    def _report_timings(self, steps):
        """Report the mean time of each phase since the last report, at `steps`."""
        self._started = None
        if not self._acc_batches or self._core is None:
            self._acc, self._acc_batches = {}, 0
            return
        m = {name: s / n for name, (s, n) in sorted(self._acc.items())}
        m.update({"group": "timing", "rank": self._core.distributed.rank,
                  "batches": self._acc_batches, "time": time.time()})
        self._acc, self._acc_batches = {}, 0
        if self._core.distributed.is_chief:
            self._send([(steps, m)], flush=False)
