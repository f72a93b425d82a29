"""determined.launch.*: `python3 -m determined.launch.FORM ARGS...` runs
`kdet-launch FORM ARGS...` (kdet.launch)."""
from kdet.launch import exec_launch  # noqa: F401

__all__ = ["exec_launch"]
