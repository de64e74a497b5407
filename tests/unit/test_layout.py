"""The node contract is stated once, in rlinfra.layout; the roles read it as the variables of the
node_contract role, whose defaults are rendered from the module (tools/node_contract.py). These
tests keep the rendered file current, the roles' paths, ports and names equal to the module's
(each role variable resolved against the contract's), the node package's few literals in
agreement with it, and every other file of the Ansible tree free of the contract's values. The
record keeps the layout a cluster was built with."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import yaml
from jinja2.nativetypes import NativeEnvironment

from rlinfra import layout
from rlinfra.deploy import read_record, write_record
from rlinfra.record import Record

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
ROLES = ANSIBLE / "roles"
PLAYBOOKS = ANSIBLE / "playbooks"
CONTRACT_DEFAULTS = REPO / layout.ANSIBLE_DEFAULTS


def role_vars(role: str, kind: str = "vars") -> dict[str, Any]:
    data = yaml.safe_load((ROLES / role / kind / "main.yml").read_text())
    assert isinstance(data, dict)
    return data


def contract_vars() -> dict[str, Any]:
    data = yaml.safe_load(CONTRACT_DEFAULTS.read_text())
    assert isinstance(data, dict)
    return data


def resolve(value: Any) -> Any:
    """A role's value with the node contract's variables filled in, as Ansible would (only the
    contract's variables are defined: a value that needs any other fails here)."""
    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    if isinstance(value, str):
        return env.from_string(value).render(contract_vars())
    if isinstance(value, list):
        return [resolve(item) for item in value]
    return value


def test_the_node_contract_role_is_rendered_from_the_module() -> None:
    assert CONTRACT_DEFAULTS.read_text() == layout.ansible_defaults(), (
        f"{layout.ANSIBLE_DEFAULTS} differs from rlinfra.layout: run python tools/node_contract.py"
    )
    expected = {
        fact.variable: list(fact.value) if isinstance(fact.value, tuple) else fact.value
        for fact in layout.FACTS
    }
    assert contract_vars() == expected  # the YAML reads back as the module's values and types
    assert len({fact.variable for fact in layout.FACTS}) == len(layout.FACTS)


def test_the_roles_use_the_controllers_layout() -> None:
    base = role_vars("base")
    assert resolve(base["base_root"]) == layout.ROOT
    assert resolve(base["base_dirs"]) == [layout.BIN, layout.LOG, layout.RUN]
    python_env = role_vars("python_env")
    assert resolve(role_vars("python_env", "defaults")["python_env_venv"]) == layout.VENV
    assert resolve(python_env["python_env_uv"]) == layout.UV
    assert resolve(python_env["python_env_requirements_file"]) == layout.REQUIREMENTS
    assert resolve(python_env["python_env_overrides_file"]) == layout.OVERRIDES
    node_env = role_vars("node_env")
    assert resolve(node_env["node_env_file"]) == layout.NODE_ENV
    assert resolve(node_env["node_env_json_file"]) == layout.CONTRACT
    assert resolve(node_env["node_env_ray_settings_file"]) == layout.RAY_SETTINGS
    node_env_defaults = role_vars("node_env", "defaults")
    assert resolve(node_env_defaults["node_env_prefixes"]) == list(layout.ENV_PREFIXES)
    assert resolve(node_env_defaults["node_env_path_prepend"]) == [
        f"{layout.VENV}/bin",
        layout.BIN,
    ]
    # node_env_contract maps each contract variable to its value: its keys are the names.
    assert tuple(node_env["node_env_contract"]) == layout.ENV_VARIABLES
    ray_cluster = role_vars("ray_cluster")
    assert resolve(ray_cluster["ray_cluster_helper"]) == layout.RAY_HELPER
    assert resolve(ray_cluster["ray_cluster_node_env"]) == layout.NODE_ENV
    ray_defaults = role_vars("ray_cluster", "defaults")
    assert resolve(ray_defaults["ray_cluster_venv"]) == layout.VENV
    ports = {
        "ray_cluster_head_port": layout.RAY_HEAD_PORT,
        "ray_cluster_dashboard_port": layout.RAY_DASHBOARD_PORT,
        "ray_cluster_dashboard_agent_listen_port": layout.RAY_DASHBOARD_AGENT_LISTEN_PORT,
        "ray_cluster_client_server_port": layout.RAY_CLIENT_SERVER_PORT,
    }
    assert {name: resolve(ray_defaults[name]) for name in ports} == ports
    preflight_ports = role_vars("preflight")["preflight_ports"]
    assert {name: resolve(preflight_ports[name].strip()) for name in ports} == ports
    acceptance = role_vars("acceptance")
    assert resolve(acceptance["acceptance_script"]) == layout.ACCEPTANCE_SCRIPT
    assert resolve(acceptance["acceptance_pidfile"]) == layout.ACCEPTANCE_PIDFILE
    assert resolve(acceptance["acceptance_node_env"]) == layout.NODE_ENV
    assert resolve(role_vars("acceptance", "defaults")["acceptance_venv"]) == layout.VENV
    storage = role_vars("storage", "defaults")
    assert resolve(storage["storage_rclone_cache_dir"]) == layout.RCLONE_CACHE
    retrieval = role_vars("retrieval_service", "defaults")
    assert resolve(retrieval["retrieval_service_venv"]) == layout.VENV
    package = role_vars("node_package", "defaults")
    assert resolve(package["node_package_dir"]) == layout.NODE_PACKAGE_DIR
    assert resolve(package["node_package_venv"]) == layout.VENV
    assert resolve(retrieval["retrieval_service_dashboard_url"]) == (
        f"http://127.0.0.1:{layout.RAY_DASHBOARD_PORT}"
    )
    home = role_vars("retrieval_service")["retrieval_service_home"]
    assert resolve(home) == layout.RETRIEVAL_HOME
    spot = role_vars("spot_watch")
    assert resolve(spot["spot_watch_pid_file"]) == layout.SPOT_WATCH_PIDFILE
    assert resolve(spot["spot_watch_log_file"]) == layout.SPOT_WATCH_LOG
    assert resolve(spot["spot_watch_providers"]) == list(layout.SPOT_PROVIDERS)
    spot_defaults = role_vars("spot_watch", "defaults")
    assert resolve(spot_defaults["spot_watch_venv"]) == layout.VENV
    token = yaml.safe_load((PLAYBOOKS / "vars" / "ray_auth.yml").read_text())
    assert resolve(token["rlinfra_ray_auth_token_path"]) == layout.RAY_TOKEN
    record_play = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())[-1]
    assert [r["role"] for r in record_play["roles"]] == ["node_contract"]
    marker = record_play["tasks"][0]["environment"]["RLINFRA_MARKER"]
    assert resolve(marker) == layout.CONVERGED


def test_the_node_package_agrees_with_the_contract() -> None:
    """rlinfra_node cannot import rlinfra: its few literals of the contract are checked here."""
    from rlinfra_node import job_runner, spot_watch
    from rlinfra_node.retrieval import __main__ as retrieval_cli

    assert str(job_runner.CONTRACT) == layout.CONTRACT  # the node side reads the members there
    members = {f"{p}_{n}" for p in layout.ENV_PREFIXES for n in layout.ENV_MEMBERSHIP}
    assert set(job_runner.MEMBERSHIP) == members  # node_env_membership_variables
    assert spot_watch.PROVIDERS == layout.SPOT_PROVIDERS
    assert (
        set(spot_watch.DEFAULT_ENDPOINTS)
        == set(spot_watch.DEFAULT_INTERVAL_S)
        == set(layout.SPOT_PROVIDERS)
    )
    # Each cloud's notices are read by a provider the node package has.
    from rlinfra.clouds.registry import CLOUDS

    told = {cloud.spot_notices for cloud in CLOUDS.values()} - {None}
    assert told == set(layout.SPOT_PROVIDERS)
    # The address the command asks when no --address is given (the role always gives one).
    dashboard = f"http://127.0.0.1:{layout.RAY_DASHBOARD_PORT}"
    assert dashboard == retrieval_cli.DASHBOARD
    # The acceptance check (a file of the acceptance role) reads the contract's variables.
    script = (ROLES / "acceptance" / "files" / "allreduce.py").read_text()
    read = set(re.findall(r"\b((?:RLINFRA|NCCL|GLOO)_[A-Z_]+)\b", script))
    names = {f"{p}_{n}" for p in layout.ENV_PREFIXES for n in layout.ENV_VARIABLES}
    assert read and read <= names | set(layout.ENV_COLLECTIVE_INTERFACE), read


# Literals that only the node_contract role's defaults may hold.
_CONTRACT_LITERALS = re.compile(
    "|".join(
        [re.escape(layout.ROOT)]
        + [
            rf"\b{port}\b"
            for port in (
                layout.RAY_HEAD_PORT,
                layout.RAY_DASHBOARD_PORT,
                layout.RAY_DASHBOARD_AGENT_LISTEN_PORT,
                layout.RAY_CLIENT_SERVER_PORT,
            )
        ]
    )
)


def test_no_other_file_of_the_ansible_tree_states_the_contract() -> None:
    found = [
        f"{path.relative_to(ANSIBLE)}:{number}: {line.strip()}"
        for path in sorted(ANSIBLE.rglob("*"))
        if path.is_file() and path != CONTRACT_DEFAULTS and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _CONTRACT_LITERALS.search(line)
    ]
    assert not found, "use the node_contract role's variables:\n" + "\n".join(found)


def test_every_role_that_reads_the_contract_depends_on_it() -> None:
    for role in sorted(p for p in ROLES.iterdir() if p.name != "node_contract"):
        text = "".join(f.read_text() for f in sorted(role.rglob("*.yml")))
        meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
        depends = [d["role"] if isinstance(d, dict) else d for d in meta["dependencies"]]
        assert ("node_contract" in depends) == ("node_contract_" in text), role.name


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
