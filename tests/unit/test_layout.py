"""The node layout is declared once (rlinfra.layout) on the controller's side; the roles hold the
same paths in their own variables (they run without the controller too). This test keeps the
two in agreement, and the record keeps the layout a cluster was built with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlinfra import layout
from rlinfra.deploy import read_record, write_record
from rlinfra.record import Record

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
PLAYBOOKS = Path(__file__).resolve().parents[2] / "ansible" / "playbooks"


def role_vars(role: str, kind: str = "vars") -> dict[str, Any]:
    data = yaml.safe_load((ROLES / role / kind / "main.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_the_roles_use_the_controllers_layout() -> None:
    assert role_vars("base")["base_root"] == layout.ROOT
    assert layout.BIN in role_vars("base")["base_dirs"]
    assert layout.RUN in role_vars("base")["base_dirs"]
    assert role_vars("python_env", "defaults")["python_env_venv"] == layout.VENV
    assert role_vars("node_env")["node_env_file"] == layout.NODE_ENV
    assert role_vars("node_env")["node_env_json_file"] == layout.CONTRACT
    assert role_vars("ray_cluster")["ray_cluster_helper"] == layout.RAY_HELPER
    assert role_vars("ray_cluster")["ray_cluster_node_env"] == layout.NODE_ENV
    acceptance = role_vars("acceptance")
    assert acceptance["acceptance_script"] == layout.ACCEPTANCE_SCRIPT
    assert acceptance["acceptance_pidfile"] == layout.ACCEPTANCE_PIDFILE
    assert acceptance["acceptance_node_env"] == layout.NODE_ENV
    token = yaml.safe_load((PLAYBOOKS / "vars" / "ray_auth.yml").read_text())
    assert token["rlinfra_ray_auth_token_path"] == layout.RAY_TOKEN
    from rlinfra_node import job_runner

    assert str(job_runner.CONTRACT) == layout.CONTRACT  # the node side reads the members there
    prefixes = role_vars("node_env", "defaults")["node_env_prefixes"]
    members = {f"{p}_{n}" for p in prefixes for n in ("NODE_IPS", "NUM_NODES")}
    assert set(job_runner.MEMBERSHIP) == members  # node_env_membership_variables
    assert f"> {layout.CONVERGED}" in (PLAYBOOKS / "site.yml").read_text().replace(".new", "")


def test_the_record_keeps_the_layout_and_reads_records_without_it(tmp_path: Path) -> None:
    write_record(tmp_path, Record(cluster="c1", paths=layout.paths()))
    record = read_record(tmp_path)
    assert record is not None and record.paths["venv"] == layout.VENV
    assert record.paths["python"] == layout.PYTHON
    older = tmp_path / "older"
    older.mkdir()
    (older / "record.json").write_text('{"cluster": "c0", "stage": "ready"}')
    old = read_record(older)
    assert old is not None and old.paths == {}
