"""kdet.core: the Core API for training scripts, in the spirit of Determined's.

    import kdet.core
    with kdet.core.init() as ctx:
        for op in ctx.searcher.operations():
            ...train to op.length batches...
            ctx.train.report_training_metrics(steps, {"loss": 0.3})
            ctx.train.report_validation_metrics(steps, {"validation_loss": 0.2})
            op.report_completed(0.2)
            if ctx.preempt.should_preempt():
                break

With KDET_CONTROLLER_URL set (the launcher's environment, docs/launcher.md)
everything goes through libdtrain's C client over ctypes (kdet._dtrain):
one implementation of batching, retries and idempotency keys for C and
Python. Without it the context runs in local mode: metrics are printed,
the searcher yields one operation of max_length, checkpoints go to a
local directory. Only the chief (rank 0) talks to the controller; the
other ranks get the chief's answers through torch.distributed broadcasts.
"""
import atexit
import builtins
import contextlib
import enum
import json
import os
import pathlib
import shutil
import sys
import tempfile
import uuid as uuidlib

from kdet import _dtrain
from kdet._profiler import ProfilerContext


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: must be an integer") from None


def _env_opt(name):
    v = os.environ.get(name)
    return None if v is None or v == "" else _env_int(name, 0)


_teardown = {"armed": False, "failed": False, "code": None}


def _exit_code(code):
    """The status Python would give for SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _exit_without_teardown():
    """Leave this multi-rank worker with os._exit at interpreter exit.

    PyTorch 1.13 can deadlock or abort ("terminate called without an
    active exception") destroying a gloo process group, the more so one
    that DistributedDataParallel holds, at destroy_process_group or while
    the interpreter finalizes. Once the script is done nothing needs that
    teardown. At exit: run the other atexit handlers (logging's flush, the
    user's), flush stdout and stderr, then os._exit with the status the
    script chose: n from sys.exit(n) or the exit(n) builtin, 1 after an
    uncaught exception, else 0 (a bare `raise SystemExit(n)` is not seen).
    Idempotent."""
    st = _teardown
    if st["armed"]:
        return
    st["armed"] = True
    prev_hook = sys.excepthook

    def hook(t, v, tb):
        st["failed"] = True
        prev_hook(t, v, tb)

    def recording(exit_fn):
        def exit_(code=None):
            st["code"] = code
            exit_fn(code)
        return exit_

    def leave():
        try:
            atexit.unregister(leave)
            atexit._run_exitfuncs()  # the handlers registered before this one
        finally:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:  # a closed or broken stream: nothing to flush
                    pass
            os._exit(1 if st["failed"] else _exit_code(st["code"]))

    sys.excepthook = hook
    sys.exit = recording(sys.exit)
    for name in ("exit", "quit"):  # the site module's builtins raise SystemExit themselves
        if hasattr(builtins, name):
            setattr(builtins, name, recording(getattr(builtins, name)))
    atexit.register(leave)


def _torch_group_live():
    """torch.distributed's default group is up (without importing torch
    for a script that never did)."""
    tdist = sys.modules.get("torch.distributed")
    return tdist is not None and tdist.is_available() and tdist.is_initialized()


class DistributedContext:
    """Ranks and collectives of one worker, as Determined's
    core.DistributedContext: rank, size, local_rank, local_size, cross_rank,
    cross_size. Arguments left out come from the launcher's env (RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE).

    With size > 1 the collectives (broadcast, allgather, gather and the
    *_local forms) run over torch.distributed: the process group the
    caller initialised, else a gloo group kdet creates on first use from
    MASTER_ADDR (or chief_ip) and MASTER_PORT (or pub_port).
    """

    def __init__(self, *, rank=None, size=None, local_rank=None, local_size=None,
                 cross_rank=None, cross_size=None, chief_ip=None, pub_port=None,
                 pull_port=None, port_offset=0, force_tcp=False):
        self.rank = _env_int("RANK", 0) if rank is None else int(rank)
        self.size = _env_int("WORLD_SIZE", 1) if size is None else int(size)
        self.local_rank = _env_int("LOCAL_RANK", 0) if local_rank is None else int(local_rank)
        self.local_size = (_env_int("LOCAL_WORLD_SIZE", 1) if local_size is None
                           else int(local_size))
        self.cross_rank = _env_int("GROUP_RANK", 0) if cross_rank is None else int(cross_rank)
        if cross_size is None:
            cross_size = _env_opt("GROUP_WORLD_SIZE")
            if cross_size is None:
                cross_size = max(1, self.size // max(1, self.local_size))
        self.cross_size = int(cross_size)
        for name, r, n in (("rank", self.rank, self.size),
                           ("local_rank", self.local_rank, self.local_size),
                           ("cross_rank", self.cross_rank, self.cross_size)):
            if n < 1 or not 0 <= r < n:
                raise ValueError(f"{name}={r}: must be in [0, {n}) (size {n})")
        if self.local_size * self.cross_size != self.size:
            raise ValueError(f"local_size={self.local_size} * cross_size={self.cross_size} "
                             f"must equal size={self.size}")
        self._chief_ip = chief_ip
        self._port = None if pub_port is None else int(pub_port) + int(port_offset)
        self._dist = None

    @classmethod
    def from_torch_distributed(cls, chief_ip=None):
        """From the env torchrun (or kdet-launch) gives each worker; KeyError
        when it is not there (a script run by hand)."""
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            if os.environ.get(k) in (None, ""):
                raise KeyError(f"{k} is not set: from_torch_distributed() needs the env "
                               "of torchrun or kdet-launch")
        return cls(chief_ip=chief_ip)

    @classmethod
    def from_deepspeed(cls, chief_ip=None):
        """The deepspeed launcher sets the same variables as torchrun."""
        return cls.from_torch_distributed(chief_ip=chief_ip)

    def get_rank(self):
        return self.rank

    def get_size(self):
        return self.size

    def get_local_rank(self):
        return self.local_rank

    def get_local_size(self):
        return self.local_size

    def get_cross_rank(self):
        return self.cross_rank

    def get_cross_size(self):
        return self.cross_size

    @property
    def is_chief(self):
        return self.rank == 0

    @property
    def is_local_chief(self):
        return self.local_rank == 0

    def _group(self):
        if self._dist is None:
            import torch.distributed as dist
            if not dist.is_initialized():
                # Long timeout: non-chief ranks wait in a broadcast while the
                # chief long-polls the searcher, which may take hours (other
                # trials first). A dead peer still fails fast (closed socket).
                import datetime
                hours = float(os.environ.get("KDET_DIST_TIMEOUT_HOURS", "24"))
                # env:// unless told otherwise: under torchrun it joins the
                # store torchrun's agent already serves on MASTER_PORT.
                method = "env://"
                if self._chief_ip or self._port:
                    addr = self._chief_ip or os.environ.get("MASTER_ADDR") or "127.0.0.1"
                    port = self._port or _env_int("MASTER_PORT", 29400)
                    method = f"tcp://{addr}:{port}"
                dist.init_process_group("gloo", init_method=method,
                                        rank=self.rank, world_size=self.size,
                                        timeout=datetime.timedelta(hours=hours))
            self._dist = dist
        return self._dist

    def broadcast(self, stuff):
        """The chief's value on every rank (any picklable value)."""
        if self.size == 1:
            return stuff
        box = [stuff]
        self._group().broadcast_object_list(box, src=0)
        return box[0]

    def allgather(self, stuff):
        """Every rank's value, in rank order, on every rank."""
        if self.size == 1:
            return [stuff]
        out = [None] * self.size
        self._group().all_gather_object(out, stuff)
        return out

    def gather(self, stuff):
        """Every rank's value in rank order on the chief; None on the others."""
        out = self.allgather(stuff)
        return out if self.is_chief else None

    def _local(self, stuff):
        return [v for r, v in self.allgather((self.cross_rank, stuff)) if r == self.cross_rank]

    def allgather_local(self, stuff):
        """The values of the ranks on this node, in local-rank order, on each of them."""
        return self._local(stuff)

    def gather_local(self, stuff):
        """The values of this node's ranks on its local chief; None on the others."""
        out = self._local(stuff)
        return out if self.is_local_chief else None

    def broadcast_local(self, stuff=None):
        """This node's local chief's value on every rank of the node."""
        return self._local(stuff)[0]

    def close(self):
        pass


class DummyDistributedContext(DistributedContext):
    """One worker alone: rank 0 of 1."""

    def __init__(self):
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0,
                         cross_size=1)


class Unit(enum.Enum):
    """The unit of the searcher's lengths (KDET_LENGTH_UNIT)."""
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class TensorboardMode(enum.Enum):
    AUTO = "AUTO"
    MANUAL = "MANUAL"


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


# The metric groups the controller stores (its metrics.kind).
METRIC_GROUPS = ("training", "validation", "profiling")


class TrainContext:
    def __init__(self, core):
        self._core = core
        self._progress = None
        self._warned_groups = set()

    def _report(self, kind, steps_completed, metrics):
        if not isinstance(metrics, dict):
            raise TypeError("metrics must be a dict of names to values")
        if not self._core.distributed.is_chief:
            return
        if kind == "training":
            self._core.profiler._batches = int(steps_completed)  # system samples' steps
        if self._core._client is None or kind not in METRIC_GROUPS:
            if kind not in METRIC_GROUPS and self._core._client is not None and \
                    kind not in self._warned_groups:
                self._warned_groups.add(kind)
                print(f"kdet: metric group {kind!r} is printed, not stored: the controller "
                      f"stores the groups {', '.join(METRIC_GROUPS)}", file=sys.stderr,
                      flush=True)
            print(f"kdet: {kind} metrics steps_completed={int(steps_completed)} "
                  f"{json.dumps(metrics, sort_keys=True, default=_jsonable)}", flush=True)
            return
        self._core._client.report(kind, steps_completed, json.loads(
            json.dumps(metrics, default=_jsonable)))

    def report_metrics(self, group, steps_completed, metrics):
        """Report one row of metrics of a group ("training", "validation",
        "profiling"; other groups are printed, not stored). Chief only."""
        if not isinstance(group, str) or not group:
            raise ValueError(f"group={group!r}: must be a non-empty string")
        self._report(group, steps_completed, metrics)

    def report_training_metrics(self, steps_completed, metrics, batch_metrics=None):
        """Report one row of training metrics (chief only; other ranks: no-op).
        Rows are batched by libdtrain and sent 100 at a time. batch_metrics
        (per-batch values) is accepted and not stored."""
        self._report("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed, metrics):
        """Report validation metrics; sent at once. Must include the
        searcher's metric when running under the controller."""
        self._report("validation", steps_completed, metrics)

    def report_profiling_metrics(self, steps_completed, metrics):
        self._report("profiling", steps_completed, metrics)

    def report_progress(self, progress):
        """The trial's progress, a fraction from 0 to 1. Kept in
        ctx.train.progress; the controller computes progress itself from
        the searcher, so nothing is sent."""
        p = float(progress)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"progress={progress!r}: must be between 0 and 1")
        self._progress = p

    @property
    def progress(self):
        return self._progress

    def report_early_exit(self, reason, message=None):
        """reason: "errored", "invalid_hp" or "user_canceled" (or an
        EarlyExitReason)."""
        reason = getattr(reason, "value", reason)
        reason = str(reason).lower()
        if reason not in ("errored", "invalid_hp", "user_canceled"):
            raise ValueError(f"reason={reason!r}: must be errored, invalid_hp or user_canceled")
        if not self._core.distributed.is_chief:
            return
        if self._core._client is None:
            print(f"kdet: early exit reason={reason} message={message!r}", flush=True)
            return
        self._core._client.exit_early(reason, message)

    def get_tensorboard_path(self):
        """A local directory for TensorBoard event files
        ($KDET_TENSORBOARD_DIR, else ./kdet-tensorboard); created on demand."""
        d = pathlib.Path(os.environ.get("KDET_TENSORBOARD_DIR") or "kdet-tensorboard")
        d.mkdir(parents=True, exist_ok=True)
        return d

    def upload_tensorboard_files(self, selector=lambda _: True, mangler=lambda p, _: p):
        """Accepted; event files stay in get_tensorboard_path()."""

    def set_status(self, status):
        if self._core.distributed.is_chief:
            print(f"kdet: status {status}", flush=True)


class EarlyExitReason(enum.Enum):
    ERRORED = "errored"
    USER_REQUESTED_STOP = "user_canceled"


def _jsonable(v):
    """Tensors and numpy scalars in metrics: their Python value."""
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except (ValueError, RuntimeError):
            pass
    if hasattr(v, "tolist"):
        return v.tolist()
    raise TypeError(f"metric value of type {type(v).__name__} is not a number, "
                    "string, list or dict")


class SearcherOperation:
    """Train until `length` (in the searcher's unit, counted from the
    trial's start), then validate and call report_completed."""

    def __init__(self, searcher, length):
        self._searcher = searcher
        self.length = length
        self.completed = False
        self.progress = 0

    def report_progress(self, length):
        """How far this operation is (in its unit); kept in op.progress."""
        if length < 0 or length > self.length:
            raise ValueError(f"length={length!r}: must be between 0 and op.length "
                             f"({self.length})")
        self.progress = length

    def report_completed(self, searcher_metric=None):
        self._searcher._completed = self.length
        self.completed = True
        self.progress = self.length

    def __repr__(self):
        return f"SearcherOperation(length={self.length})"


class SearcherContext:
    def __init__(self, core, max_length):
        self._core = core
        self._max_length = max_length
        self._completed = 0

    def get_configured_units(self):
        """The unit of op.length: KDET_LENGTH_UNIT (batches, records or
        epochs), batches by default and in local mode."""
        u = (os.environ.get("KDET_LENGTH_UNIT") or "batches").upper()
        try:
            return Unit[u]
        except KeyError:
            raise ValueError(f"KDET_LENGTH_UNIT={u.lower()!r}: must be batches, records "
                             "or epochs") from None

    def acknowledge_out_of_ops(self):
        """Accepted: the trial ends when the worker exits."""

    def _next(self):
        core = self._core
        if core._client is None:
            if self._completed >= self._max_length:
                return (0, _dtrain.SEARCHER_STOP)
            return (self._max_length, 0)
        return core._client.searcher_next(self._completed, -1)

    def operations(self, searcher_mode=SearcherMode.WorkersAskChief, auto_ack=True, *,
                   completed=None):
        """Yield the searcher's operations until the trial should stop.

        Under the controller the chief long-polls for the next operation
        and (searcher_mode WorkersAskChief, the default) broadcasts it:
        every rank must iterate. With ChiefOnly only the chief iterates.
        When the answer is "preempt", iteration ends and
        ctx.preempt.should_preempt() returns True. `completed` is the length
        already trained (e.g. restored from a checkpoint); by default what
        the previous operations completed.
        """
        if completed is not None:
            self._completed = int(completed)
        core = self._core
        mode = SearcherMode(searcher_mode)
        if mode == SearcherMode.ChiefOnly and not core.distributed.is_chief:
            raise RuntimeError("searcher_mode=ChiefOnly: only the chief (rank 0) iterates "
                               "the searcher's operations")
        while True:
            ans = self._next() if core.distributed.is_chief else None
            if mode == SearcherMode.WorkersAskChief:
                ans = core.distributed.broadcast(ans)
            length, stop = ans
            if stop == _dtrain.SEARCHER_PREEMPT:
                core.preempt._set()
                return
            if stop:
                return
            op = SearcherOperation(self, length)
            yield op
            if not op.completed:
                if core.distributed.is_chief:
                    raise RuntimeError(f"{op!r} was not reported completed "
                                       "(op.report_completed)")
                op.report_completed()  # the chief reports; the others follow it


class PreemptContext:
    def __init__(self, core, mode=PreemptMode.WorkersAskChief):
        self._core = core
        self._mode = PreemptMode(mode)
        self._preempted = False
        self._signalled = False
        self.acknowledged = False

    def _set(self):
        self._preempted = True

    def signal(self):
        """Mark this rank as asked to stop (the harness calls it on SIGTERM:
        kdet-launch forwards the pod's SIGTERM to every worker). Only sets a
        flag; the next should_preempt() turns it into a collective answer."""
        self._signalled = True

    def should_preempt(self, auto_ack=True, *, wait_ms=0):
        """True when the trial should checkpoint and exit. With the default
        mode (WorkersAskChief) it is collective: every rank must call it;
        the answer is True on all ranks when the controller told the chief,
        or any rank got SIGTERM (harness). With ChiefOnly only the chief
        calls it. auto_ack: acknowledge the signal at once (the controller
        needs no acknowledgement; the flag is kept in .acknowledged)."""
        if self._preempted:
            return True
        core = self._core
        ans = self._signalled
        if not ans and core.distributed.is_chief and core._client is not None:
            ans = core._client.should_preempt(wait_ms)
        if self._mode == PreemptMode.WorkersAskChief:
            ans = any(core.distributed.allgather(bool(ans)))
        elif not core.distributed.is_chief:
            raise RuntimeError("preempt_mode=ChiefOnly: only the chief (rank 0) calls "
                               "should_preempt()")
        if ans:
            self._preempted = True
            if auto_ack:
                self.acknowledge_preemption_signal()
        return bool(ans)

    def acknowledge_preemption_signal(self):
        """Say the signal was seen; the worker should checkpoint and exit."""
        self.acknowledged = True


def _dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def _read_tree(root):
    """{relative path: bytes} of the files under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            full = os.path.join(d, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = fh.read()
    return out


class CheckpointContext:
    """Checkpoints: written to a local directory, uploaded by libdtrain to
    $KDET_CHECKPOINT_STORAGE (a checkpoint_storage JSON object or a URL;
    default file://$KDET_CHECKPOINT_DIR, else ./kdet-checkpoints), then
    registered with the controller. Storage ids are uuids."""

    def __init__(self, core, storage=None):
        self._core = core
        if storage is None:
            storage = os.environ.get("KDET_CHECKPOINT_STORAGE")
        if isinstance(storage, dict):
            storage = json.dumps(storage)
        if not storage:
            d = os.path.abspath(os.environ.get("KDET_CHECKPOINT_DIR") or "kdet-checkpoints")
            storage = "file://" + d
        self.storage = storage
        self._store = None

    def _open(self):
        if self._store is None:
            if self.storage.startswith("file://") and self._core.local:
                os.makedirs(self._local_root(), exist_ok=True)
            try:
                self._store = _dtrain.CheckpointStore(self.storage)
            except OSError:
                # No libdtrain.so: local mode with a file:// URL copies directly.
                if self._core._client is not None or not self.storage.startswith("file://"):
                    raise
                self._store = False
        return self._store

    def _local_root(self):
        return self.storage[len("file://"):]

    def _merge_shards(self, ckpt_dir, shard):
        """shard=True: every rank calls; the others' files are sent to the
        chief and written into its directory (a file two ranks write is an
        error). Returns False on the non-chief ranks."""
        if not shard or self._core.distributed.size == 1:
            if not self._core.distributed.is_chief:
                raise RuntimeError("checkpoints are saved by the chief (rank 0) only; "
                                   "with shard=True every rank calls it")
            return True
        dist = self._core.distributed
        files = _read_tree(ckpt_dir) if not dist.is_chief and ckpt_dir else {}
        parts = dist.gather(files)
        if not dist.is_chief:
            return False
        mine = set(_read_tree(ckpt_dir)) if ckpt_dir else set()
        for rank, part in enumerate(parts[1:], start=1):
            for rel, data in part.items():
                if rel in mine:
                    raise RuntimeError(f"checkpoint file {rel!r} is written by two ranks "
                                       f"(the chief or an earlier one, and rank {rank})")
                mine.add(rel)
                dst = os.path.join(ckpt_dir, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst, "wb") as f:
                    f.write(data)
        return True

    def upload(self, ckpt_dir, metadata=None, *, shard=False, selector=None, uuid=None):
        """Store ckpt_dir as a checkpoint; returns its storage id (a uuid).
        metadata["steps_completed"] is the batches trained (default 0).
        shard=False: the chief alone calls it. shard=True: every rank
        calls it (collective) with its own files; the id is returned on
        every rank."""
        if shard and self._core.distributed.size > 1:
            uuid = self._core.distributed.broadcast(uuid or str(uuidlib.uuid4()))
        if not self._merge_shards(os.fspath(ckpt_dir) if ckpt_dir else None, shard):
            return self._core.distributed.broadcast(None)
        metadata = dict(metadata or {})
        steps = int(metadata.get("steps_completed", 0))
        metadata["steps_completed"] = steps
        trial = os.environ.get("KDET_TRIAL_ID")
        if trial:
            metadata.setdefault("trial_id", trial)
        uuid = uuid or str(uuidlib.uuid4())
        ckpt_dir = os.fspath(ckpt_dir)
        # As Determined does: the metadata travels with the files.
        with open(os.path.join(ckpt_dir, "metadata.json"), "w") as f:
            json.dump(metadata, f, indent=2, sort_keys=True)
        store = self._open()
        if store is False:
            dst = os.path.join(self._local_root(), uuid)
            shutil.copytree(ckpt_dir, dst)
            with open(os.path.join(dst, "kdet-metadata.json"), "w") as f:
                json.dump(metadata, f)
        else:
            store.save(ckpt_dir, uuid, metadata)
        path = self.storage.rstrip("/") + "/" + uuid if "://" in self.storage else uuid
        if self._core._client is not None:
            self._core._client.register_checkpoint(uuid, steps, path, _dir_size(ckpt_dir),
                                                   metadata)
        else:
            print(f"kdet: checkpoint uuid={uuid} steps_completed={steps} path={path}", flush=True)
        if shard and self._core.distributed.size > 1:
            self._core.distributed.broadcast(uuid)
        return uuid

    @contextlib.contextmanager
    def store_path(self, metadata=None, *, shard=False):
        """with ctx.checkpoint.store_path({"steps_completed": N}) as (path, storage_id):
        write files into path (a pathlib.Path); on a clean exit they are
        uploaded and the checkpoint registered. shard=False: chief only;
        shard=True: every rank, each writing its own files."""
        if not shard and not self._core.distributed.is_chief:
            raise RuntimeError("checkpoints are saved by the chief (rank 0) only; "
                               "with shard=True every rank calls store_path")
        tmp = tempfile.mkdtemp(prefix="kdet-ckpt-")
        uuid = str(uuidlib.uuid4())
        if shard and self._core.distributed.size > 1:
            uuid = self._core.distributed.broadcast(uuid)
        try:
            yield pathlib.Path(tmp), uuid
            self.upload(tmp, metadata, shard=shard, uuid=uuid)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def download(self, storage_id, ckpt_dir, download_mode=DownloadMode.NoSharedDownload,
                 *, selector=None):
        """Download checkpoint storage_id into ckpt_dir (created; must not
        hold files of the same names). Sizes and sha256 are verified."""
        ckpt_dir = os.fspath(ckpt_dir)
        store = self._open()
        if store is False:
            src = os.path.join(self._local_root(), storage_id)
            if not os.path.isdir(src):
                raise FileNotFoundError(f"checkpoint {storage_id}: no directory {src}")
            shutil.copytree(src, ckpt_dir, dirs_exist_ok=True)
            return
        if os.path.isdir(ckpt_dir) and not os.listdir(ckpt_dir):
            os.rmdir(ckpt_dir)
        store.restore(storage_id, ckpt_dir)

    @contextlib.contextmanager
    def restore_path(self, storage_id, download_mode=DownloadMode.NoSharedDownload, *,
                     selector=None):
        """with ctx.checkpoint.restore_path(storage_id) as path: read the
        checkpoint's files (a pathlib.Path; downloaded and verified). Any
        rank may call it."""
        store = self._open()
        if store is False:
            path = os.path.join(self._local_root(), storage_id)
            if not os.path.isdir(path):
                raise FileNotFoundError(f"checkpoint {storage_id}: no directory {path}")
            yield pathlib.Path(path)
            return
        tmp = tempfile.mkdtemp(prefix="kdet-restore-")
        try:
            dst = os.path.join(tmp, "ckpt")
            store.restore(storage_id, dst)
            yield pathlib.Path(dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def get_metadata(self, storage_id):
        """The checkpoint's metadata (downloads it)."""
        with self.restore_path(storage_id) as p:
            for name in ("metadata.json", "kdet-metadata.json"):
                if (p / name).exists():
                    return json.loads((p / name).read_text())
        return {}

    def close(self):
        if self._store:
            self._store.close()
        self._store = None


class Context:
    """What kdet.core.init() returns; use it as a context manager."""

    def __init__(self, max_length=None, distributed=None, checkpoint_storage=None,
                 preempt_mode=PreemptMode.WorkersAskChief):
        from kdet import _info
        self.distributed = distributed if distributed is not None else DistributedContext()
        self._client = None
        if os.environ.get("KDET_CONTROLLER_URL") and self.distributed.is_chief:
            self._client = _dtrain.Client()
        self.local = not os.environ.get("KDET_CONTROLLER_URL")
        if max_length is None:
            max_length = _env_int("KDET_MAX_LENGTH", 100)
        self.train = TrainContext(self)
        self.searcher = SearcherContext(self, max_length)
        self.preempt = PreemptContext(self, preempt_mode)
        self.checkpoint = CheckpointContext(self, checkpoint_storage)
        self.profiler = ProfilerContext(self)
        self.info = _info.get_cluster_info()
        hp = os.environ.get("KDET_HPARAMS")
        self.hparams = json.loads(hp) if hp else {}
        self.latest_checkpoint = os.environ.get("KDET_LATEST_CHECKPOINT") or None
        seed = os.environ.get("KDET_TRIAL_SEED")
        self.trial_seed = int(seed) if seed else 0
        self.trial_id = os.environ.get("KDET_TRIAL_ID")
        self.profiler._start_from_config()  # profiling.enabled in the experiment's config

    def close(self):
        try:
            self.checkpoint.close()
            self.profiler.close()
        finally:
            if self._client is not None:
                c, self._client = self._client, None
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and exc_type not in (KeyboardInterrupt, SystemExit) \
                and self._client is not None:
            try:
                self._client.exit_early("errored", f"{exc_type.__name__}: {exc}"[:4000])
            except Exception as e:  # the original exception matters more
                print(f"kdet: could not report the early exit: {e}", file=sys.stderr)
        try:
            self.close()
        finally:
            if self.distributed.size > 1 and _torch_group_live():
                self._leave_cleanly(exc_type is None)
        return False

    def _leave_cleanly(self, done):
        """A multi-rank worker over torch.distributed: a final barrier when
        the block ended normally (every rank is done with its collectives),
        then exit without the process group's teardown."""
        if done:
            try:
                sys.modules["torch.distributed"].barrier()
            except Exception as e:  # a peer is gone; exit anyway
                print(f"kdet: final barrier failed: {e}", file=sys.stderr)
        _exit_without_teardown()


def init(*, max_length=None, distributed=None, checkpoint_storage=None,
         preempt_mode=PreemptMode.WorkersAskChief, tensorboard_mode=TensorboardMode.AUTO,
         async_checkpointing=True):
    """The Core API context for this worker (see the module docstring).

    max_length: the single operation's length in local mode (default
    $KDET_MAX_LENGTH, else 100). distributed: a DistributedContext (default:
    from the launcher's env). checkpoint_storage: a checkpoint_storage dict
    or URL (default $KDET_CHECKPOINT_STORAGE). tensorboard_mode and
    async_checkpointing are accepted; uploads are synchronous."""
    return Context(max_length=max_length, distributed=distributed,
                   checkpoint_storage=checkpoint_storage, preempt_mode=preempt_mode)
