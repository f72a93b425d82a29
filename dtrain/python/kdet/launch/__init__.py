"""python3 -m kdet.launch.FORM ARGS...: the same as `kdet-launch FORM ARGS...`.

Determined's entrypoints (`python3 -m determined.launch.torch_distributed`)
are mapped by kdet's config onto kdet-launch; these modules let a user who
runs the module directly get the same behaviour: they replace the Python
process with kdet-launch (from $KDET_LAUNCH, else PATH).
"""
import os
import shutil
import sys

# torchrun of PyTorch 1.x on Python 3.11 cannot parse its own default
# --redirects/--tee "0" (Std.from_str returns None: IntFlag iteration skips
# the zero member) and fails before starting any worker. torchrun reads its
# defaults from PET_* variables; the mapping "9:3" parses, and leaves local
# ranks 0 to 8 (and 10 on) unredirected, the same as "0"; local rank 9, if
# any, is teed to the console.
TORCHRUN_STD_FIX = "9:3"


def _torch_version():
    try:
        import importlib.metadata
        return importlib.metadata.version("torch")
    except Exception:  # no torch, or no metadata: nothing to work around
        return None


def torchrun_env(env, argv, py_version, torch_version):
    """The variables to add for torchrun (the torch_distributed form): the
    PET_REDIRECTS/PET_TEE work-around when the interpreter is 3.11 or newer
    and torch 1.x, unless the user chose them (in the env or as
    --redirects/--tee overrides). A dict, empty when nothing is needed."""
    if torch_version is None or py_version < (3, 11) or not torch_version.startswith("1."):
        return {}
    overrides = argv[:argv.index("--")] if "--" in argv else []
    out = {}
    for var, opt, short in (("PET_REDIRECTS", "--redirects", "-r"), ("PET_TEE", "--tee", "-t")):
        chosen = any(a in (opt, short) or a.startswith(opt + "=") for a in overrides)
        if var not in env and not chosen:
            out[var] = TORCHRUN_STD_FIX
    return out


def exec_launch(form, argv=None):
    """exec kdet-launch [FORM] ARGS...; returns only on failure (exit 127)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    launch = os.environ.get("KDET_LAUNCH") or shutil.which("kdet-launch")
    if not launch:
        print("kdet.launch: kdet-launch not found on PATH (set KDET_LAUNCH to its path)",
              file=sys.stderr)
        return 127
    args = [launch] + ([form] if form else []) + argv
    if form == "torch_distributed":
        os.environ.update(torchrun_env(os.environ, argv, sys.version_info[:2], _torch_version()))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(launch, args)
    except OSError as e:
        print(f"kdet.launch: cannot run {launch}: {e}", file=sys.stderr)
        return 126
