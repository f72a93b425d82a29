"""get_cluster_info(): what a trial's worker knows about itself, in the
shape of Determined's det.get_cluster_info(), read from the env the
controller and kdet-launch set (docs/python.md).

kdet names trials and experiments (Trial and Experiment resources). Under
a controller with its database, KDET_TRIAL_INT_ID and KDET_EXPERIMENT_INT_ID
carry the store's integer ids, the ones `det` and the API show, and are
used as they are. Without them (local runs, no database) the ids are
derived from the names:

- trial.trial_id: KDET_TRIAL_ID when it is an integer; else the trial's
  index n, from its name `<experiment>-<n>` (the controller's scheme);
  else a stable 31-bit hash of the name. Unique within an experiment.
- trial.experiment_id: KDET_EXPERIMENT when it is an integer; else a
  stable 31-bit hash (CRC-32) of `<namespace>/<experiment>`.

The same names always give the same ids, so a paused and resumed trial
keeps its ids.
"""
import json
import os
import re
import zlib

# The format Determined's harness logs with (logging.basicConfig(format=...)).
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def _stable_id(text):
    """A positive 31-bit integer, the same for the same text everywhere."""
    return (zlib.crc32(text.encode()) & 0x7FFFFFFF) or 1


def _int_or_none(v):
    if v is not None and re.fullmatch(r"[0-9]{1,18}", v):
        return int(v)
    return None


def derive_trial_id(trial, experiment=None):
    """The integer id of a trial named `trial` (see the module docstring)."""
    n = _int_or_none(trial)
    if n is not None:
        return n
    if experiment and trial.startswith(experiment + "-"):
        n = _int_or_none(trial[len(experiment) + 1:])
        if n is not None:
            return n
    m = re.fullmatch(r".*-([0-9]{1,18})", trial)
    if m:
        return int(m.group(1))
    return _stable_id(trial)


def derive_experiment_id(experiment, namespace=None, trial=None):
    """The integer id of an experiment (see the module docstring). Without
    KDET_EXPERIMENT it is derived from the trial name less its index."""
    if not experiment and trial:
        m = re.fullmatch(r"(.*)-[0-9]{1,18}", trial)
        experiment = m.group(1) if m else trial
    if not experiment:
        return None
    n = _int_or_none(experiment)
    if n is not None:
        return n
    return _stable_id(f"{namespace or 'default'}/{experiment}")


class TrialInfo:
    """cluster_info.trial: trial_id and experiment_id (integers), the
    names they came from, hparams, trial_seed, config, steps_completed."""

    def __init__(self, trial_name, experiment_name, namespace, hparams, seed, config,
                 trial_int_id=None, experiment_int_id=None):
        self.trial_name = trial_name
        self.experiment_name = experiment_name or None
        self.trial_id = (_int_or_none(trial_int_id)
                         or derive_trial_id(trial_name, experiment_name))
        self.experiment_id = (_int_or_none(experiment_int_id)
                              or derive_experiment_id(experiment_name, namespace, trial_name))
        self.hparams = hparams
        self.trial_seed = seed
        self._config = config
        self.steps_completed = 0
        self.trial_run_id = 1
        self.debug = False
        self.inter_node_network_interface = None

    @property
    def config(self):
        return self._config

    def __repr__(self):
        return (f"TrialInfo(trial_id={self.trial_id}, experiment_id={self.experiment_id}, "
                f"trial_name={self.trial_name!r})")


class ClusterInfo:
    """det.get_cluster_info(): the worker's view of the cluster."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        trial = env.get("KDET_TRIAL_ID") or ""
        exp = env.get("KDET_EXPERIMENT") or ""
        ns = env.get("KDET_NAMESPACE") or None
        hp = env.get("KDET_HPARAMS")
        try:
            hparams = json.loads(hp) if hp else {}
        except ValueError as e:
            raise ValueError(f"KDET_HPARAMS: not JSON: {e}") from None
        seed = env.get("KDET_TRIAL_SEED")
        cfg = env.get("KDET_EXPERIMENT_CONFIG")
        config = json.loads(cfg) if cfg else {"hyperparameters": hparams}
        self.master_url = env.get("KDET_CONTROLLER_URL") or None
        self.cluster_id = ns or "default"
        self.agent_id = env.get("HOSTNAME") or None
        self.slot_ids = list(range(int(env.get("LOCAL_WORLD_SIZE") or 1)))
        self.task_id = trial or None
        self.allocation_id = env.get("KDET_RUN_ID") or None
        self.session_token = None  # the token stays in libdtrain's client
        self.task_type = "TRIAL" if trial else "COMMAND"
        self.master_cert_file = None
        self.master_cert_name = None
        self.latest_checkpoint = env.get("KDET_LATEST_CHECKPOINT") or None
        addrs = env.get("KDET_NODE_ADDRS")
        if addrs:
            self.container_addrs = [a for a in addrs.split(",") if a]
        else:
            self.container_addrs = [env.get("KDET_CHIEF_ADDR") or env.get("MASTER_ADDR")
                                    or "127.0.0.1"]
        self.container_rank = int(env.get("KDET_NODE_RANK") or env.get("GROUP_RANK") or 0)
        self.gpu_uuids = []
        self.user_data = {}
        self.trial = TrialInfo(trial, exp, ns, hparams, int(seed) if seed else 0, config,
                               env.get("KDET_TRIAL_INT_ID"), env.get("KDET_EXPERIMENT_INT_ID"))

    def __repr__(self):
        return f"ClusterInfo(task_type={self.task_type!r}, trial={self.trial!r})"


def get_cluster_info():
    """The ClusterInfo of this worker, or None off-cluster (no
    KDET_TRIAL_ID and no KDET_CONTROLLER_URL in the env)."""
    if not os.environ.get("KDET_TRIAL_ID") and not os.environ.get("KDET_CONTROLLER_URL"):
        return None
    return ClusterInfo()
