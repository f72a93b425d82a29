"""python3 -m kdet.launch.FORM ARGS...: the same as `kdet-launch FORM ARGS...`.

Determined's entrypoints (`python3 -m determined.launch.torch_distributed`)
are mapped by kdet's config onto kdet-launch; these modules let a user who
runs the module directly get the same behaviour: they replace the Python
process with kdet-launch (from $KDET_LAUNCH, else PATH).
"""
import os
import shutil
import sys


def exec_launch(form, argv=None):
    """exec kdet-launch [FORM] ARGS...; returns only on failure (exit 127)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    launch = os.environ.get("KDET_LAUNCH") or shutil.which("kdet-launch")
    if not launch:
        print("kdet.launch: kdet-launch not found on PATH (set KDET_LAUNCH to its path)",
              file=sys.stderr)
        return 127
    args = [launch] + ([form] if form else []) + argv
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(launch, args)
    except OSError as e:
        print(f"kdet.launch: cannot run {launch}: {e}", file=sys.stderr)
        return 126
