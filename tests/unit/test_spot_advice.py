"""`plan` warns when a spot profile would lose its work to a preemption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.contexts import fixed_context
from rlinfra.clouds.planning import make_plan
from rlinfra.errors import ProfileError
from rlinfra.jobspec import TRAINERS, VERL_CPU_TRAINER, job_spec
from rlinfra.plan import Plan
from rlinfra.profile import profile_from_data
from rlinfra.render import ansible_vars
from rlinfra_node.spot_watch import NOTICE_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]
RLINFRA = str(Path(sys.executable).with_name("rlinfra"))


def h100x2(**changes: object) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((ROOT / "profiles/h100x2.yaml").read_text())
    data["resources"]["spot"] = True  # type: ignore[index]
    data.update(changes)
    return data


def warnings_of(data: dict[str, object]) -> list[str]:
    profile = profile_from_data(data, "p.yaml", "p")
    return [w for w in job_spec(make_plan(profile, "p.yaml")).warnings if "spot" in w]


def test_a_spot_trainer_that_saves_into_the_bucket_gets_no_warning() -> None:
    assert warnings_of(h100x2()) == []  # h100x2 saves every 10 steps into the mounted bucket


def test_a_spot_trainer_that_never_saves_is_warned() -> None:
    data = h100x2()
    data["workload"]["overrides"].pop("trainer.save_freq")  # type: ignore[index]
    (unset,) = warnings_of(data)
    assert "never saves a checkpoint (trainer.save_freq unset, Verl's default -1)" in unset
    data["workload"]["overrides"]["trainer.save_freq"] = -1  # type: ignore[index]
    (given,) = warnings_of(data)
    assert "(trainer.save_freq -1)" in given


def test_a_spot_trainer_whose_checkpoints_stay_on_the_node_is_warned() -> None:
    data = h100x2()
    data["storage"][0]["mode"] = "COPY"  # type: ignore[index]
    (warning,) = warnings_of(data)
    assert "never written back" in warning and "use mode MOUNT" in warning


def test_on_demand_profiles_are_not_warned() -> None:
    data = h100x2()
    data["resources"]["spot"] = False  # type: ignore[index]
    data["workload"]["overrides"].pop("trainer.save_freq")  # type: ignore[index]
    assert warnings_of(data) == []


def test_plan_shows_the_warning(tmp_path: Path) -> None:
    data = h100x2()
    data["workload"]["overrides"].pop("trainer.save_freq")  # type: ignore[index]
    path = tmp_path / "spotty.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "RLINFRA_HOME": str(tmp_path / "home"), "AWS_EC2_METADATA_DISABLED": "1"}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        [RLINFRA, "plan", "-p", str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Warning: resources.spot: the trainer never saves a checkpoint" in done.stderr


# ------------------------------------------------------------------------------------------
# Preemption notices: spot nodes run the watcher, the job reads its folder.


def plan_of(data: dict[str, object]) -> Plan:
    return make_plan(profile_from_data(data, "p.yaml", "p"), "p.yaml")


def test_a_spot_job_runs_the_patched_launcher_and_reads_notices_where_the_nodes_write() -> None:
    plan = plan_of(h100x2())
    spec = job_spec(plan)
    assert spec.entrypoint[:3] == VERL_CPU_TRAINER
    assert spec.runtime_env_vars[NOTICE_DIR_ENV] == "/checkpoints/rlinfra/notices"
    role = ansible_vars(plan, fixed_context())
    assert plan.cloud in ("aws", "gcp")  # h100x2 runs on the cheaper of the two
    assert role["spot_watch_enabled"] is True and role["spot_watch_provider"] == plan.cloud
    assert role["spot_watch_notice_dir"] == spec.runtime_env_vars[NOTICE_DIR_ENV]
    assert Path(role["node_package_src"], "spot_watch.py").is_file()
    # Every variable the driver sets is a setting the role declares.
    defaults = yaml.safe_load((ROOT / "ansible/roles/spot_watch/defaults/main.yml").read_text())
    assert {k for k in role if k.startswith("spot_watch_")} <= set(defaults)


def test_gcp_spot_nodes_watch_gcp_metadata() -> None:
    data: dict[str, object] = yaml.safe_load((ROOT / "profiles/h100x8-gcp.yaml").read_text())
    data["resources"]["spot"] = True  # type: ignore[index]
    plan = plan_of(data)
    assert ansible_vars(plan, fixed_context())["spot_watch_provider"] == "gcp"
    assert NOTICE_DIR_ENV in job_spec(plan).runtime_env_vars


def test_on_demand_nodes_run_no_watcher_and_verl_unpatched() -> None:
    data = h100x2()
    data["resources"]["spot"] = False  # type: ignore[index]
    plan = plan_of(data)
    spec = job_spec(plan)
    assert spec.entrypoint[:3] == TRAINERS["verl"]
    assert NOTICE_DIR_ENV not in spec.runtime_env_vars
    assert not any(k.startswith("spot_watch") for k in ansible_vars(plan, fixed_context()))


def test_the_notice_folder_is_rlinfras_to_set() -> None:
    data = h100x2()
    data["workload"]["runtime_env"] = {NOTICE_DIR_ENV: "/tmp/elsewhere"}  # type: ignore[index]
    with pytest.raises(ProfileError, match=f"{NOTICE_DIR_ENV} is set by rlinfra on spot"):
        job_spec(plan_of(data))
