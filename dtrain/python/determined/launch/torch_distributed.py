"""python3 -m determined.launch.torch_distributed ARGS...: exec `kdet-launch torch_distributed ARGS...` (docs/launcher.md)."""
import sys

from kdet.launch import exec_launch

if __name__ == "__main__":
    sys.exit(exec_launch("torch_distributed"))
