"""python3 -m determined.launch.horovod ARGS...: exec `kdet-launch horovod ARGS...` (docs/launcher.md)."""
import sys

from kdet.launch import exec_launch

if __name__ == "__main__":
    sys.exit(exec_launch("horovod"))
