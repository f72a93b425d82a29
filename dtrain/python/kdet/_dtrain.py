"""ctypes bindings to libdtrain.so's controller client and checkpoint uploader.

One implementation of retries, batching and idempotency keys (the C
client), shared by C and Python workers. The library is looked up in
$KDET_LIBDTRAIN, then in ../lib/ next to the kdet-launch on PATH, then by
the dynamic linker (ldconfig paths, LD_LIBRARY_PATH).
"""
import ctypes
import ctypes.util
import json
import os
import shutil

ERRLEN = 1024
UUIDLEN = 37
SEARCHER_STOP = 1
SEARCHER_PREEMPT = 2

ENOTFOUND = -1003
ETIMEDOUT = -1007

_NAMES = {
    -1001: "DTRAIN_EINVAL", -1002: "DTRAIN_ENOMEM", -1003: "DTRAIN_ENOTFOUND",
    -1004: "DTRAIN_ECONFLICT", -1006: "DTRAIN_EAGAIN", -1007: "DTRAIN_ETIMEDOUT",
    -1009: "DTRAIN_EPARSE", -1010: "DTRAIN_ETOOBIG", -1012: "DTRAIN_EUNAUTHORIZED",
    -1015: "DTRAIN_EPROTO", -1021: "DTRAIN_ECONNECT",
}


class DtrainError(RuntimeError):
    """A libdtrain call failed: .code is the negative DTRAIN_E* value."""

    def __init__(self, func, code, msg):
        self.code = code
        self.name = _NAMES.get(code, str(code))
        super().__init__(f"{func}: {self.name}: {msg}")


def _candidates():
    env = os.environ.get("KDET_LIBDTRAIN")
    if env:
        yield env
        return
    launch = shutil.which("kdet-launch")
    if launch:
        yield os.path.join(os.path.dirname(os.path.realpath(launch)), "..", "lib", "libdtrain.so")
    found = ctypes.util.find_library("dtrain")
    if found:
        yield found
    yield "libdtrain.so"


_lib = None


def load():
    """The loaded library (cached); raises OSError naming what was tried."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        _declare(lib)
        _lib = lib
        return lib
    raise OSError("libdtrain.so not found; set KDET_LIBDTRAIN. Tried: " + "; ".join(tried))


def _declare(lib):
    P, C, I, L, I64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_long, ctypes.c_int64
    sig = {
        "dtrain_client_from_env": ([ctypes.POINTER(P), C], I),
        "dtrain_client_free": ([P], None),
        "dtrain_report_metrics": ([P, C, I64, C, C], I),
        "dtrain_client_flush": ([P, C], I),
        "dtrain_searcher_next": ([P, I64, L, ctypes.POINTER(I64), ctypes.POINTER(I), C], I),
        "dtrain_should_preempt": ([P, L, ctypes.POINTER(I), C], I),
        "dtrain_checkpoint_register": ([P, C, I64, C, I64, C, C], I),
        "dtrain_exit_early": ([P, C, C, C], I),
        "dtrain_checkpoint_open": ([C, ctypes.POINTER(P), C], I),
        "dtrain_checkpoint_save_async": ([P, C, C, C, I, C, C], I),
        "dtrain_checkpoint_wait": ([P, C], I),
        "dtrain_checkpoint_restore": ([P, C, C, C], I),
        "dtrain_checkpoint_close": ([P, C], I),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = res


def _b(s):
    return None if s is None else str(s).encode()


def _call(name, *args):
    err = ctypes.create_string_buffer(ERRLEN)
    rc = getattr(load(), name)(*args, err)
    if rc != 0:
        raise DtrainError(name, rc, err.value.decode(errors="replace"))


class Client:
    """The trial's controller client (dtrain_client_from_env). Thread-safe."""

    def __init__(self):
        h = ctypes.c_void_p()
        _call("dtrain_client_from_env", ctypes.byref(h))
        self._h = h

    def close(self):
        if self._h:
            try:
                _call("dtrain_client_flush", self._h)
            finally:
                load().dtrain_client_free(self._h)
                self._h = None

    def report(self, kind, batches, metrics):
        _call("dtrain_report_metrics", self._h, _b(kind), int(batches), _b(json.dumps(metrics)))

    def flush(self):
        _call("dtrain_client_flush", self._h)

    def searcher_next(self, completed, timeout_ms=-1):
        """(length, stop): stop is 0, SEARCHER_STOP or SEARCHER_PREEMPT."""
        length, stop = ctypes.c_int64(0), ctypes.c_int(0)
        _call("dtrain_searcher_next", self._h, int(completed), int(timeout_ms),
              ctypes.byref(length), ctypes.byref(stop))
        return length.value, stop.value

    def should_preempt(self, wait_ms=0):
        p = ctypes.c_int(0)
        _call("dtrain_should_preempt", self._h, int(wait_ms), ctypes.byref(p))
        return bool(p.value)

    def register_checkpoint(self, uuid, batches, storage_path, size, metadata):
        _call("dtrain_checkpoint_register", self._h, _b(uuid), int(batches), _b(storage_path),
              int(size), _b(json.dumps(metadata) if metadata is not None else None))

    def exit_early(self, reason, message=None):
        _call("dtrain_exit_early", self._h, _b(reason), _b(message))


class CheckpointStore:
    """Checkpoint storage (dtrain_checkpoint_open): a JSON checkpoint_storage
    object or a URL (s3://bucket/prefix, file:///path)."""

    def __init__(self, storage):
        h = ctypes.c_void_p()
        _call("dtrain_checkpoint_open", _b(storage), ctypes.byref(h))
        self._h = h

    def save(self, directory, uuid, metadata):
        """Upload directory as checkpoint uuid and wait until it is complete."""
        out = ctypes.create_string_buffer(UUIDLEN)
        _call("dtrain_checkpoint_save_async", self._h, _b(directory), _b(uuid),
              _b(json.dumps(metadata)), 0, out)
        _call("dtrain_checkpoint_wait", self._h)
        return out.value.decode()

    def restore(self, uuid, directory):
        _call("dtrain_checkpoint_restore", self._h, _b(uuid), _b(directory))

    def close(self):
        if self._h:
            h, self._h = self._h, None
            _call("dtrain_checkpoint_close", h)
