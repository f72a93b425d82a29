"""kdet: the Python side of kdet's data plane (docs/python.md).

kdet.core      the Core API for training scripts (metrics, searcher,
               preemption, checkpoints), over libdtrain's C client
kdet.pytorch   PyTorchTrial and its context
kdet.harness   python3 -m kdet.harness --trial FILE:CLASS
kdet.launch    python3 -m kdet.launch.torch_distributed ... (exec kdet-launch)
"""
__version__ = "0.1.0"

from kdet._info import LOG_FORMAT, ClusterInfo, TrialInfo, get_cluster_info  # noqa: E402,F401

__all__ = ["ClusterInfo", "LOG_FORMAT", "TrialInfo", "__version__", "get_cluster_info"]
