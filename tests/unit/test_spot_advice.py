"""`plan` warns when a spot profile would lose its work to a preemption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from rlinfra.plan import make_plan
from rlinfra.profile import profile_from_data
from rlinfra.workloads.spec import job_spec

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
