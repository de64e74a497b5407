"""The node contract, stated once: where rlinfra puts its files on a node, the ports Ray listens
on, the names of the environment variables the node contract exports, and the clouds whose
preemption notices the spot watcher reads.

The driver reads these facts here, and the cluster's record keeps the paths a cluster's nodes
were built with (``Record.paths``), so that an auditor reads the layout of its nodes. The Ansible
roles read them as the variables of one role, ``node_contract`` (``node_contract_root``, ...),
which every role that needs them depends on. That role's ``defaults/main.yml`` is rendered from
``FACTS`` by ``tools/node_contract.py`` (``--check`` says whether the committed file is current);
tests/unit/test_layout.py fails when the file differs from the render or when a role states one
of these values itself. Where a user may change a value, the role keeps a variable of its own
(``python_env_venv``, ``ray_cluster_dashboard_port``) whose default is the contract's variable.

rlinfra_node runs on the nodes without the driver and never imports this module: it receives the
values it needs as arguments that the roles pass, or keeps a literal (``job_runner.CONTRACT``,
``job_runner.MEMBERSHIP``, ``spot_watch.PROVIDERS``, the retrieval command's dashboard address)
that tests/unit/test_layout.py checks against this module.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

# ---- Paths on a node: everything rlinfra installs is under ROOT. ----------------------------
ROOT = "/opt/rlinfra"
VENV = f"{ROOT}/venv"
PYTHON = f"{VENV}/bin/python"
BIN = f"{ROOT}/bin"
LOG = f"{ROOT}/log"
JOBS = f"{ROOT}/jobs"
RUN = f"{ROOT}/run"
UV = f"{BIN}/uv"
REQUIREMENTS = f"{ROOT}/requirements.txt"
OVERRIDES = f"{ROOT}/overrides.txt"
RAY_TOKEN = f"{ROOT}/ray/auth_token"
RAY_HELPER = f"{BIN}/rlinfra-ray-node"
RAY_SETTINGS = f"{RUN}/ray-settings.json"
CONVERGED = f"{ROOT}/converged"
CONTRACT = f"{ROOT}/node.json"
NODE_ENV = f"{ROOT}/node.env"
# Keys a node keeps for itself (0700; files 0600): the ssh cloud's bucket key, sent over SSH.
SECRETS = f"{ROOT}/secrets"
BUCKET_CREDENTIALS = f"{SECRETS}/buckets.env"
ACCEPTANCE_SCRIPT = f"{BIN}/allreduce.py"
ACCEPTANCE_PIDFILE = f"{RUN}/acceptance.pid"
NODE_PACKAGE_DIR = f"{ROOT}/node"
RETRIEVAL_HOME = f"{ROOT}/retrieval"
RCLONE_CACHE = f"{ROOT}/cache/rclone"
SPOT_WATCH_PIDFILE = f"{ROOT}/spot_watch.pid"
SPOT_WATCH_LOG = f"{ROOT}/logs/spot_watch.log"

# ---- Ray's ports (Ray's own defaults); a profile's network.ray changes them. -----------------
RAY_HEAD_PORT = 6379
RAY_DASHBOARD_PORT = 8265
RAY_DASHBOARD_AGENT_LISTEN_PORT = 52365
RAY_CLIENT_SERVER_PORT = 10001

# ---- The node contract's environment (node.env, node.json). ---------------------------------
# Each contract variable is exported once per prefix: RLINFRA_NODE_RANK, SKYPILOT_NODE_RANK, ...
ENV_PREFIXES = ("RLINFRA", "SKYPILOT")
# The contract's variables, without prefix, in file order. node_env's node_env_contract maps each
# to its value (its keys are these names; tests/unit/test_layout.py checks that they agree).
ENV_VARIABLES = (
    "NODE_IPS",
    "NODE_RANK",
    "NUM_NODES",
    "NUM_GPUS_PER_NODE",
    "TASK_ID",
    "CLUSTER_INFO",
)
# The contract variables that name the cluster's members rather than this node's settings.
ENV_MEMBERSHIP = ("NODE_IPS", "NUM_NODES")
# The variables that name the collective interface, for NCCL and for gloo.
ENV_COLLECTIVE_INTERFACE = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")

# ---- Spot nodes: the providers of preemption notices the node package reads (a cloud names its
# own: Cloud.spot_notices). ----------------------------------------------------------------
SPOT_PROVIDERS = ("aws", "gcp")


def paths() -> dict[str, str]:
    """The layout as the record keeps it."""
    return {
        "root": ROOT,
        "venv": VENV,
        "python": PYTHON,
        "bin": BIN,
        "jobs": JOBS,
        "run": RUN,
        "ray_token": RAY_TOKEN,
        "contract": CONTRACT,
        "node_env": NODE_ENV,
    }


# ---- The node_contract role ------------------------------------------------------------------

ANSIBLE_PREFIX = "node_contract_"
ANSIBLE_DEFAULTS = "ansible/roles/node_contract/defaults/main.yml"

Value = str | int | tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    """One fact as the roles read it: the variable ``node_contract_<name>``, its value and what
    it is (the comment above it in the role's defaults)."""

    name: str
    value: Value
    doc: str

    @property
    def variable(self) -> str:
        return ANSIBLE_PREFIX + self.name


FACTS: tuple[Fact, ...] = (
    Fact("root", ROOT, "The folder that holds everything rlinfra installs on a node."),
    Fact("venv", VENV, "The node's Python virtual environment (python_env_venv's default)."),
    Fact("python", PYTHON, "The interpreter of that virtual environment."),
    Fact("bin", BIN, "rlinfra's programs on the node (uv, the Ray helper, the acceptance check)."),
    Fact("log", LOG, "A folder for logs (base creates it)."),
    Fact(
        "jobs",
        JOBS,
        "The jobs the controller sends to the head, one folder each (spec, package, secrets).",
    ),
    Fact("run", RUN, "State of running programs (pid files, what Ray started with)."),
    Fact("uv", UV, "The uv binary that python_env installs."),
    Fact("requirements", REQUIREMENTS, "The requirement list (or lock) python_env installs."),
    Fact("overrides", OVERRIDES, "The requirement overrides python_env installs with."),
    Fact("ray_token", RAY_TOKEN, "The cluster's Ray token (0600, in a 0700 folder)."),
    Fact("ray_helper", RAY_HELPER, "The node-local Ray helper (start, join, status, stop)."),
    Fact("ray_settings", RAY_SETTINGS, "What Ray on this node was started with."),
    Fact("converged", CONVERGED, "The digest of the inputs the last full run of site.yml applied."),
    Fact("node_env", NODE_ENV, "The node contract as `export K='V'` lines, for shells and Ray."),
    Fact("node_json", CONTRACT, "The node contract as a JSON object, for jobs."),
    Fact("secrets", SECRETS, "Keys a node keeps for itself (0700; files 0600)."),
    Fact("bucket_credentials", BUCKET_CREDENTIALS, "The ssh cloud's bucket key, sent over SSH."),
    Fact("acceptance_script", ACCEPTANCE_SCRIPT, "The acceptance check (an all-reduce)."),
    Fact("acceptance_pidfile", ACCEPTANCE_PIDFILE, "The running acceptance check's pid."),
    Fact(
        "node_package_dir",
        NODE_PACKAGE_DIR,
        "The folder that holds the rlinfra_node package; it goes on the venv's sys.path.",
    ),
    Fact("retrieval_home", RETRIEVAL_HOME, "The retrieval service's folder on the head."),
    Fact("rclone_cache", RCLONE_CACHE, "rclone's write cache for mounted buckets."),
    Fact("spot_watch_pidfile", SPOT_WATCH_PIDFILE, "The spot notice watcher's pid."),
    Fact("spot_watch_log", SPOT_WATCH_LOG, "The spot notice watcher's log."),
    Fact("ray_head_port", RAY_HEAD_PORT, "Ray's GCS port on the head."),
    Fact("ray_dashboard_port", RAY_DASHBOARD_PORT, "Ray's dashboard (state and job API) port."),
    Fact(
        "ray_dashboard_agent_listen_port",
        RAY_DASHBOARD_AGENT_LISTEN_PORT,
        "The HTTP port of Ray's dashboard agent on every node.",
    ),
    Fact("ray_client_server_port", RAY_CLIENT_SERVER_PORT, "Ray's client server port on the head."),
    Fact(
        "env_prefixes",
        ENV_PREFIXES,
        "Prefixes each contract variable is exported under (RLINFRA_NODE_RANK, SKYPILOT_NODE_RANK).",
    ),
    Fact(
        "env_membership",
        ENV_MEMBERSHIP,
        "The contract's variables that name the cluster's members, not this node's settings.",
    ),
    Fact(
        "env_collective_interface",
        ENV_COLLECTIVE_INTERFACE,
        "The variables that name the collective interface (NCCL, gloo).",
    ),
    Fact(
        "spot_providers",
        SPOT_PROVIDERS,
        "The clouds whose metadata service gives preemption notices (rlinfra_node.spot_watch).",
    ),
)

_HEADER = """\
---
# node_contract: the node contract (paths on a node, Ray's ports, the names of the contract's
# environment variables, the spot notice providers) for the roles that depend on this one.
# Settings a user may change are those roles' own variables, which default to these.
#
# Generated from driver/rlinfra/layout.py by `python tools/node_contract.py`: change the module
# and run it again; tests/unit/test_layout.py fails while this file differs from the module.
"""
_PLAIN = re.compile(r"[A-Za-z/][A-Za-z0-9_./-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none"}


def _scalar(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value)


def ansible_defaults() -> str:
    """The node_contract role's defaults/main.yml, from FACTS."""
    out = [_HEADER]
    for fact in FACTS:
        out.append("\n")
        out.extend(f"# {line}\n" for line in textwrap.wrap(fact.doc, width=97))
        if isinstance(fact.value, tuple):
            out.append(f"{fact.variable}:\n")
            out.extend(f"  - {_scalar(item)}\n" for item in fact.value)
        else:
            out.append(f"{fact.variable}: {_scalar(fact.value)}\n")
    return "".join(out)
