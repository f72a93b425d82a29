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
import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid as uuidlib

from kdet import _dtrain


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: must be an integer") from None


class DistributedContext:
    """Ranks from the launcher's env (RANK, WORLD_SIZE, LOCAL_RANK, ...).

    With size > 1, broadcast/gather use torch.distributed (gloo,
    init_method env://), initialised on first use unless the caller did.
    """

    def __init__(self):
        self.rank = _env_int("RANK", 0)
        self.size = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.local_size = _env_int("LOCAL_WORLD_SIZE", 1)
        self.cross_rank = _env_int("GROUP_RANK", 0)
        self.cross_size = _env_int("GROUP_WORLD_SIZE", 1)
        if not 0 <= self.rank < self.size:
            raise ValueError(f"RANK={self.rank}: must be in [0, WORLD_SIZE={self.size})")
        self._dist = None

    def get_rank(self):
        return self.rank

    def get_size(self):
        return self.size

    def get_local_rank(self):
        return self.local_rank

    @property
    def is_chief(self):
        return self.rank == 0

    def _group(self):
        if self._dist is None:
            import torch.distributed as dist
            if not dist.is_initialized():
                # Long timeout: non-chief ranks wait in a broadcast while the
                # chief long-polls the searcher, which may take hours (other
                # trials first). A dead peer still fails fast (closed socket).
                import datetime
                hours = float(os.environ.get("KDET_DIST_TIMEOUT_HOURS", "24"))
                dist.init_process_group("gloo", init_method="env://", rank=self.rank,
                                        world_size=self.size,
                                        timeout=datetime.timedelta(hours=hours))
            self._dist = dist
        return self._dist

    def broadcast(self, obj):
        """The chief's obj on every rank (any picklable value)."""
        if self.size == 1:
            return obj
        box = [obj]
        self._group().broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj):
        """Every rank's obj, in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        out = [None] * self.size
        self._group().all_gather_object(out, obj)
        return out


class TrainContext:
    def __init__(self, core):
        self._core = core

    def _report(self, kind, steps_completed, metrics):
        if not isinstance(metrics, dict):
            raise TypeError("metrics must be a dict of names to values")
        if not self._core.distributed.is_chief:
            return
        if self._core._client is None:
            print(f"kdet: {kind} metrics steps_completed={int(steps_completed)} "
                  f"{json.dumps(metrics, sort_keys=True)}", flush=True)
            return
        self._core._client.report(kind, steps_completed, metrics)

    def report_training_metrics(self, steps_completed, metrics):
        """Report one row of training metrics (chief only; other ranks: no-op).
        Rows are batched by libdtrain and sent 100 at a time."""
        self._report("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed, metrics):
        """Report validation metrics; sent at once. Must include the
        searcher's metric when running under the controller."""
        self._report("validation", steps_completed, metrics)

    def report_profiling_metrics(self, steps_completed, metrics):
        self._report("profiling", steps_completed, metrics)

    def report_early_exit(self, reason, message=None):
        """reason: "errored", "invalid_hp" or "user_canceled"."""
        if reason not in ("errored", "invalid_hp", "user_canceled"):
            raise ValueError(f"reason={reason!r}: must be errored, invalid_hp or user_canceled")
        if not self._core.distributed.is_chief:
            return
        if self._core._client is None:
            print(f"kdet: early exit reason={reason} message={message!r}", flush=True)
            return
        self._core._client.exit_early(reason, message)


class SearcherOperation:
    """Train until `length` (batches, counted from the trial's start), then
    validate and call report_completed."""

    def __init__(self, searcher, length):
        self._searcher = searcher
        self.length = length
        self.completed = False

    def report_completed(self, searcher_metric=None):
        self._searcher._completed = self.length
        self.completed = True

    def __repr__(self):
        return f"SearcherOperation(length={self.length})"


class SearcherContext:
    def __init__(self, core, max_length):
        self._core = core
        self._max_length = max_length
        self._completed = 0

    def operations(self, completed=None):
        """Yield the searcher's operations until the trial should stop.

        Under the controller the chief long-polls for the next operation and
        broadcasts it. When the answer is "preempt", iteration ends and
        ctx.preempt.should_preempt() returns True. `completed` is the length
        already trained (e.g. restored from a checkpoint); by default what
        the previous operations completed.
        """
        if completed is not None:
            self._completed = int(completed)
        core = self._core
        while True:
            if core.distributed.is_chief:
                if core._client is None:
                    if self._completed >= self._max_length:
                        ans = (0, _dtrain.SEARCHER_STOP)
                    else:
                        ans = (self._max_length, 0)
                else:
                    ans = core._client.searcher_next(self._completed, -1)
            else:
                ans = None
            length, stop = core.distributed.broadcast(ans)
            if stop == _dtrain.SEARCHER_PREEMPT:
                core.preempt._set()
                return
            if stop:
                return
            op = SearcherOperation(self, length)
            yield op
            if not op.completed:
                raise RuntimeError(f"{op!r} was not reported completed (op.report_completed)")


class PreemptContext:
    def __init__(self, core):
        self._core = core
        self._preempted = False
        self._signalled = False

    def _set(self):
        self._preempted = True

    def signal(self):
        """Mark this rank as asked to stop (the harness calls it on SIGTERM:
        kdet-launch forwards the pod's SIGTERM to every worker). Only sets a
        flag; the next should_preempt() turns it into a collective answer."""
        self._signalled = True

    def should_preempt(self, wait_ms=0):
        """True when the trial should checkpoint and exit. Collective: every
        rank must call it; the answer is True on all ranks when the
        controller told the chief, or any rank got SIGTERM (harness)."""
        if self._preempted:
            return True
        core = self._core
        ans = self._signalled
        if not ans and core.distributed.is_chief and core._client is not None:
            ans = core._client.should_preempt(wait_ms)
        ans = any(core.distributed.gather(bool(ans)))
        if ans:
            self._preempted = True
        return ans


def _dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


class CheckpointContext:
    """Checkpoints: written to a local directory, uploaded by libdtrain to
    $KDET_CHECKPOINT_STORAGE (a checkpoint_storage JSON object or a URL;
    default file://$KDET_CHECKPOINT_DIR, else ./kdet-checkpoints), then
    registered with the controller."""

    def __init__(self, core):
        self._core = core
        storage = os.environ.get("KDET_CHECKPOINT_STORAGE")
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

    def upload(self, ckpt_dir, metadata, uuid=None):
        """Store ckpt_dir as a checkpoint (chief only); returns its uuid.
        metadata must hold "steps_completed" (batches trained)."""
        if not self._core.distributed.is_chief:
            raise RuntimeError("checkpoints are saved by the chief (rank 0) only")
        metadata = dict(metadata or {})
        steps = int(metadata.get("steps_completed", 0))
        metadata["steps_completed"] = steps
        trial = os.environ.get("KDET_TRIAL_ID")
        if trial:
            metadata.setdefault("trial_id", trial)
        uuid = uuid or str(uuidlib.uuid4())
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
        return uuid

    @contextlib.contextmanager
    def store_path(self, metadata):
        """with ctx.checkpoint.store_path({"steps_completed": N}) as (path, uuid):
        write files into path; on a clean exit they are uploaded and the
        checkpoint registered (chief only)."""
        tmp = tempfile.mkdtemp(prefix="kdet-ckpt-")
        uuid = str(uuidlib.uuid4())
        try:
            yield tmp, uuid
            self.upload(tmp, metadata, uuid)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @contextlib.contextmanager
    def restore_path(self, uuid):
        """with ctx.checkpoint.restore_path(uuid) as path: read the
        checkpoint's files (downloaded and verified). Any rank may call it."""
        store = self._open()
        if store is False:
            path = os.path.join(self._local_root(), uuid)
            if not os.path.isdir(path):
                raise FileNotFoundError(f"checkpoint {uuid}: no directory {path}")
            yield path
            return
        tmp = tempfile.mkdtemp(prefix="kdet-restore-")
        try:
            dst = os.path.join(tmp, "ckpt")
            store.restore(uuid, dst)
            yield dst
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def close(self):
        if self._store:
            self._store.close()
        self._store = None


class Context:
    """What kdet.core.init() returns; use it as a context manager."""

    def __init__(self, max_length=None):
        self.distributed = DistributedContext()
        self._client = None
        if os.environ.get("KDET_CONTROLLER_URL") and self.distributed.is_chief:
            self._client = _dtrain.Client()
        self.local = not os.environ.get("KDET_CONTROLLER_URL")
        if max_length is None:
            max_length = _env_int("KDET_MAX_LENGTH", 100)
        self.train = TrainContext(self)
        self.searcher = SearcherContext(self, max_length)
        self.preempt = PreemptContext(self)
        self.checkpoint = CheckpointContext(self)
        hp = os.environ.get("KDET_HPARAMS")
        self.hparams = json.loads(hp) if hp else {}
        self.latest_checkpoint = os.environ.get("KDET_LATEST_CHECKPOINT") or None
        seed = os.environ.get("KDET_TRIAL_SEED")
        self.trial_seed = int(seed) if seed else 0
        self.trial_id = os.environ.get("KDET_TRIAL_ID")

    def close(self):
        try:
            self.checkpoint.close()
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
        self.close()
        return False


def init(max_length=None):
    """The Core API context for this worker (see the module docstring).
    max_length: the single operation's length in local mode (default
    $KDET_MAX_LENGTH, else 100)."""
    return Context(max_length=max_length)
