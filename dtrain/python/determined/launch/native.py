"""python3 -m determined.launch.native ARGS...: exec `kdet-launch ARGS...` (one worker per slot)."""
import sys

from kdet.launch import exec_launch

if __name__ == "__main__":
    sys.exit(exec_launch(None))
