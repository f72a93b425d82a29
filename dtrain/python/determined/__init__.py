"""determined: Determined's Python API names for kdet's implementation.

`import determined as det` gives the same objects as `import kdet`:
det.core is kdet.core, det.pytorch is kdet.pytorch, and
`python3 -m determined.launch.torch_distributed` runs kdet-launch's
torch_distributed form. See docs/python.md for what differs.
"""
import importlib

from kdet import __version__  # noqa: F401
from kdet._info import LOG_FORMAT, ClusterInfo, TrialInfo, get_cluster_info  # noqa: F401

__all__ = ["ClusterInfo", "LOG_FORMAT", "TrialInfo", "__version__", "get_cluster_info"]
_SUBMODULES = ("core", "pytorch", "launch")


def __getattr__(name):
    # det.pytorch after a bare `import determined as det`, without importing
    # torch for scripts that never touch it (PEP 562).
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
