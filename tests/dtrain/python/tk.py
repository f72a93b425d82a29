"""A tiny test runner for the kdet Python tests: cases, `N passed, N failed`,
subprocesses in their own process groups that are always reaped."""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback

PY = "/usr/bin/python3"  # Debian's interpreter, the one with python3-torch
SRC = os.path.abspath(os.environ.get("KD_SRC") or
                      os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.path.abspath(os.environ.get("KD_BUILD") or os.path.join(SRC, "build"))
PYPATH = os.path.join(SRC, "dtrain", "python")
TRIALS = os.path.join(SRC, "tests", "dtrain", "python", "trials.py")
EXAMPLE = os.path.join(PYPATH, "examples", "fashion_mnist_trial.py")
LIBDTRAIN = os.path.join(BUILD, "lib", "libdtrain.so")
LAUNCH = os.path.join(BUILD, "bin", "kdet-launch")

sys.path.insert(0, PYPATH)
_cases = []
_procs = []


def case(fn):
    _cases.append(fn)
    return fn


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**kw):
    """The environment of a worker: no KDET_* or torch variables from outside."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("KDET_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                    "MASTER_ADDR", "MASTER_PORT")}
    e["PYTHONPATH"] = PYPATH
    e["KDET_LIBDTRAIN"] = LIBDTRAIN
    e["KDET_PYTHON"] = PY
    e["OMP_NUM_THREADS"] = "1"
    e["PATH"] = os.path.join(BUILD, "bin") + ":" + e.get("PATH", "/usr/bin:/bin")
    for k, v in kw.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


@contextlib.contextmanager
def local_env(**kw):
    """os.environ of a local-mode worker for the duration (env() + kw)."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env(**kw))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def rows(out, kind):
    """(steps, metrics) of each "kdet: KIND metrics" line local mode printed."""
    return [(int(m.group(1)), json.loads(m.group(2))) for m in
            re.finditer(rf"kdet: {kind} metrics steps_completed=(\d+) (\{{.*\}})", out)]


def start(argv, e, **kw):
    p = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True, **kw)
    _procs.append(p)
    return p


def run(argv, e, timeout=120, **kw):
    """(rc, output) of argv; killed (its whole group) after timeout."""
    p = start(argv, e, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(f"{argv} timed out after {timeout}s; output:\n{out[-3000:]}")
    return p.returncode, out


_tmps = []


def tmpdir():
    """A temporary directory, removed when the tests end."""
    d = tempfile.mkdtemp(prefix="kdet-pytest-")
    _tmps.append(d)
    return d


def main():
    passed = failed = 0
    only = [c for c in os.environ.get("KD_TEST_CASES", "").split(",") if c]
    for fn in _cases:
        if only and not any(c in fn.__name__ for c in only):
            continue
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc()
            sys.stdout.flush()
    for p in _procs:  # nothing left behind
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            failed += 1
            print(f"FAIL left-over process {p.args}", flush=True)
            continue
        try:  # members of its process group still alive?
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            continue
        os.killpg(p.pid, signal.SIGKILL)
        failed += 1
        print(f"FAIL processes left in the group of {p.args}", flush=True)
    for d in _tmps:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)
