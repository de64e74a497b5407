"""Where rlinfra puts its files on a node: one place for the controller's code (jobs, checks,
status, the ssh cloud's preflight and down), rendered into the roles' variables
(``python_env_venv``) and kept in the cluster's record (``Record.paths``), so that an auditor
reads the layout a cluster's nodes were built with.

The roles' own variables hold the same paths (a role runs without the controller too);
tests/unit/test_layout.py checks that they agree with this module.
"""

from __future__ import annotations

ROOT = "/opt/rlinfra"
VENV = f"{ROOT}/venv"
PYTHON = f"{VENV}/bin/python"
BIN = f"{ROOT}/bin"
JOBS = f"{ROOT}/jobs"
RUN = f"{ROOT}/run"
RAY_TOKEN = f"{ROOT}/ray/auth_token"
RAY_HELPER = f"{BIN}/rlinfra-ray-node"
CONVERGED = f"{ROOT}/converged"
CONTRACT = f"{ROOT}/node.json"
NODE_ENV = f"{ROOT}/node.env"
# Keys a node keeps for itself (0700; files 0600): the ssh cloud's bucket key, sent over SSH.
SECRETS = f"{ROOT}/secrets"
BUCKET_CREDENTIALS = f"{SECRETS}/buckets.env"
ACCEPTANCE_SCRIPT = f"{BIN}/allreduce.py"
ACCEPTANCE_PIDFILE = f"{RUN}/acceptance.pid"


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
