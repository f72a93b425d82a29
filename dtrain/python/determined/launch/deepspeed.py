"""python3 -m determined.launch.deepspeed ARGS...: exec `kdet-launch deepspeed ARGS...` (docs/launcher.md)."""
import sys

from kdet.launch import exec_launch

if __name__ == "__main__":
    sys.exit(exec_launch("deepspeed"))
