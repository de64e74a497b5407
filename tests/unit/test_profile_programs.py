"""Every program a built-in profile's job can start exists where it will run.

A profile names programs in its job (data steps, probes, the trainer, after-training steps, the
server) and those programs start others (the merger, vLLM, the Google search server). This test
collects them from the rendered JobSpec of every profile and from the programs' own command
builders, and fails on any that does not exist:

- ``python3 -m MODULE``: the module's file is in the package that provides it (found without
  importing it: Verl's trainer imports GPU-only packages). rlinfra's own node modules are also
  started with ``--help`` here; the ones that need Verl run in tests/verl and tests/e2e.
- an executable (``huggingface-cli``, ``vllm``): a package of the profile's pin set provides it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlinfra.clouds.planning import make_plan
from rlinfra.jobspec import job_spec
from rlinfra.profile import Overrides, apply_overrides, known_profiles, load_profile

DRIVER = Path(__file__).resolve().parents[2] / "driver"
# Executables and the pip package that installs each.
EXECUTABLES = {"huggingface-cli": "huggingface_hub", "vllm": "vllm"}
# Variables a review may leave empty but a run needs.
RUN_ENV = {"RETRIEVAL_SERVICE_URL": "http://10.0.0.5:8000"}


def module_file(name: str) -> Path | None:
    """The file ``python -m name`` runs, found without importing the package."""
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    for candidate in (path.with_suffix(".py"), path / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def programs(name: str) -> list[tuple[str, ...]]:
    """Every command line the profile's job starts, and those its programs start in turn."""
    profile, source = load_profile(name)
    profile, changes = apply_overrides(
        profile, Overrides(env={k: v for k, v in RUN_ENV.items() if k in profile.env}), source
    )
    plan = make_plan(profile, source, overrides=tuple(changes))
    if profile.workload is None:
        return []
    spec = job_spec(plan)
    out = [step.argv for step in (*spec.data_steps, *spec.probe_steps, *spec.after_steps)]
    out.append(spec.entrypoint)
    return out


def package_of(requirement: str) -> str:
    name = requirement.split("@")[0].split("[")[0]
    for sep in ("==", ">=", "<=", "<", ">", "~="):
        name = name.split(sep)[0]
    return name.strip().lower().replace("-", "_")


def started_by(argv: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Programs that a node program starts itself, from its own command builders."""
    module = argv[2] if argv[:2] == ("python3", "-m") else ""
    out: list[tuple[str, ...]] = []
    if module == "rlinfra_node.after_training":
        from rlinfra_node.after_training import merge_argv

        out.append(tuple(merge_argv(Path("actor"), Path("target"), python="python3")))
    if module == "rlinfra_node.model_server" and "deploy" in argv:
        from rlinfra_node.model_server import ServerConfig

        engine = argv[argv.index("--engine") + 1]
        built = ServerConfig(engine, "m", "127.0.0.1", 9090).argv(python="python3")
        out.append((Path(built[0]).name, *built[1:]) if engine == "vllm" else tuple(built))
    if module == "rlinfra_node.search_infer" and "google" in argv:
        out.append(("python3", "-m", "rlinfra_node.google_search"))
    return out


@pytest.mark.parametrize("name", sorted(known_profiles()))
def test_every_program_the_job_starts_exists(name: str) -> None:
    profile, _ = load_profile(name)
    pins = make_plan(profile, name).pins
    packages = {package_of(p) for p in pins.packages}
    seen = []
    queue = programs(name)
    while queue:
        argv = queue.pop(0)
        seen.append(argv)
        queue.extend(started_by(argv))
        if argv[:2] == ("python3", "-m"):
            assert module_file(argv[2]) is not None, f"{name}: no module {argv[2]}"
        else:
            exe = Path(argv[0]).name
            assert exe in EXECUTABLES, f"{name}: unknown program {exe}"
            assert EXECUTABLES[exe] in packages, f"{name}: {exe} needs {EXECUTABLES[exe]}"
    if profile.workload is not None:
        assert seen, name


def node_modules() -> list[str]:
    found = set()
    for name in sorted(known_profiles()):
        stack = programs(name)
        while stack:
            argv = stack.pop()
            stack.extend(started_by(argv))
            if argv[:2] == ("python3", "-m") and argv[2].startswith("rlinfra_node."):
                found.add(argv[2])
    return sorted(found)


@pytest.mark.parametrize("module", node_modules())
def test_rlinfras_node_programs_start(module: str) -> None:
    """Each starts and explains itself (``--help``, exit 0); CPU mode needs Verl: tests/verl."""
    if module.startswith("rlinfra_node.verl_cpu"):
        assert module_file(module) is not None
        return
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        env={**os.environ, "PYTHONPATH": str(DRIVER)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()
