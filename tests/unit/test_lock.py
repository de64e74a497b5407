"""`rlinfra lock`: pin sets resolved into hash-pinned lock files, and nodes installing them.

The cpu-sandbox lock is made for real here (uv against PyPI, plus the local torch wheel that only
pip's find-links know). The GPU pin sets cannot be locked on this machine: the PyTorch cu126 index
and the flash-attn wheel's URL are not reachable; a test resolves the rest of them against PyPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlinfra.controller import uv_binary
from rlinfra.errors import UsageError
from rlinfra.lock import (
    compile_argv,
    current_lock,
    lock,
    lock_python_version,
    one_line_per_requirement,
    pin_digest,
    pip_find_links,
    render_lock,
)
from rlinfra.pins import pin_sets

ROOT = Path(__file__).resolve().parents[2]
CHECK_REQUIREMENTS = ROOT / "ansible" / "roles" / "python_env" / "files" / "check_requirements.py"
HASH = "--hash=sha256:" + "0" * 64


def pypi_reachable() -> bool:
    try:
        socket.getaddrinfo("pypi.org", 443)
    except OSError:
        return False
    return True


def test_gpu_pin_set_compile_command() -> None:
    pins = pin_sets()["verl-cu126"]
    argv = compile_argv("uv", pins, Path("req.in"), Path("out.txt"), ["/wheels"])
    assert argv[:4] == ["uv", "pip", "compile", "req.in"]
    assert "--generate-hashes" in argv
    assert argv[argv.index("--python-version") + 1] == "3.10"
    assert argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_35"
    assert argv[argv.index("--torch-backend") + 1] == "cu126"
    assert argv[argv.index("--find-links") + 1] == "/wheels"
    names = " ".join(pins.packages)
    for wanted in (
        "vllm==0.10.0",
        "verl==0.6.0",
        "uvloop==0.21.0",
        "click<8.2.0",
        "ray[default,train]",
        "flash_attn-2.8.3+cu12torch2.7cxx11abiFALSE-cp310-cp310-linux_x86_64.whl",
        "flashinfer-python",
        "hf_transfer",
        "torch==2.7.1",
    ):
        assert wanted in names, wanted


def test_system_python_sets_lock_for_this_controller() -> None:
    pins = pin_sets()["cpu-sandbox"]
    assert lock_python_version(pins) == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_continuations_are_joined_and_unhashed_lines_refused() -> None:
    text = "# header\nray==2.60.0 \\\n    --hash=sha256:{a} \\\n    --hash=sha256:{b}\nsix==1.17.0 \\\n    --hash=sha256:{a}\n".format(
        a="a" * 64, b="b" * 64
    )
    assert one_line_per_requirement(text) == [
        f"ray==2.60.0 --hash=sha256:{'a' * 64} --hash=sha256:{'b' * 64}",
        f"six==1.17.0 --hash=sha256:{'a' * 64}",
    ]
    pins = pin_sets()["cpu-sandbox"]
    rendered = render_lock(pins, text)
    assert f"# pin set digest: {pin_digest(pins)}" in rendered
    with pytest.raises(Exception, match="without hashes: six==1.17.0"):
        render_lock(pins, "six==1.17.0\n")


def test_find_links_come_from_pip_env_and_config(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    config = f"global.find-links='{b}'\n:env:.find-links='{a}'\nglobal.cert='/x'\n"
    found = pip_find_links({"PIP_FIND_LINKS": f"{a} {tmp_path / 'missing'}"}, config)
    assert found == [str(a), str(b)]


def test_shipped_cpu_sandbox_lock_is_current_and_fully_hashed() -> None:
    pins = pin_sets()["cpu-sandbox"]
    path = current_lock(pins)
    assert path is not None, "run `rlinfra lock cpu-sandbox`"
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert all("--hash=sha256:" in line for line in lines)
    names = {line.split()[0] for line in lines}
    assert "ray==2.60.0" in names
    assert any(name.startswith("torch==2.13.0") for name in names)
    assert not any(name.startswith("nvidia-") for name in names), "the CUDA torch was locked"
    # A pin set edited after locking no longer uses its lock.
    edited = dataclasses.replace(pins, packages=(*pins.packages, "six"))
    assert current_lock(edited) is None


def test_unknown_pin_set_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown pin set 'nope'"):
        lock("nope", uv="uv")


@pytest.mark.skipif(not pypi_reachable(), reason="PyPI is not reachable")
def test_lock_cpu_sandbox_for_real(tmp_path: Path) -> None:
    out = tmp_path / "cpu-sandbox.txt"
    result = lock("cpu-sandbox", out, uv=uv_binary())
    text = out.read_text()
    assert result.requirements > 10
    assert current_lock(pin_sets()["cpu-sandbox"]) is not None
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all("--hash=sha256:" in line for line in lines)
    assert any(line.startswith("ray==2.60.0 ") for line in lines)
    assert any(line.startswith("torch==2.13.0") for line in lines)
    # No path of this machine in the lock (find-links folders are not written).
    for folder in pip_find_links(os.environ, ""):
        assert folder not in text


@pytest.mark.skipif(not pypi_reachable(), reason="PyPI is not reachable")
@pytest.mark.parametrize("name", ["verl-cu126", "verl-sglang-cu126"])
def test_gpu_pin_sets_resolve_on_pypi_without_the_unreachable_sources(
    name: str, tmp_path: Path
) -> None:
    """Not the lock itself: without the PyTorch cu126 index and the flash-attn URL (unreachable
    here), the rest of the set must still resolve together for Python 3.10 on Linux."""
    pins = pin_sets()[name]
    reachable = dataclasses.replace(
        pins,
        torch_backend=None,
        packages=tuple(p for p in pins.packages if " @ " not in p),
    )
    req = tmp_path / "req.in"
    req.write_text("\n".join(reachable.packages) + "\n")
    out = tmp_path / "out.txt"
    from rlinfra.controller import uv_binary

    argv = compile_argv(uv_binary(), reachable, req, out)
    env = dict(os.environ, UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never")
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = {
        line.split("==")[0]: line.split()[0] for line in one_line_per_requirement(out.read_text())
    }
    for module, version in pins.imports:
        dist = {"flash_attn": "flash-attn"}.get(module, module)
        if version and dist in resolved:
            assert resolved[dist].split("==")[1].split("+")[0] == version, resolved[dist]
    assert resolved["transformers"].startswith("transformers==4.")


def test_render_passes_the_lock_to_the_python_env_role() -> None:
    from rlinfra.clouds.planning import make_plan
    from rlinfra.context import Context, Controller
    from rlinfra.profile import load_profile
    from rlinfra.render import LOCK_FILE, render

    ctx = Context(
        deployment_dir=Path("/srv/rlinfra/clusters/c"),
        home=Path("/srv/rlinfra"),
        cache=Path("/srv/rlinfra/cache"),
        ssh_public_key="ssh-ed25519 AAAA x",
        task_id="c-1",
        controller=Controller(uv_binary="/uv", system_python="/usr/bin/python3", wheelhouse="/w"),
    )
    profile, source = load_profile("local")
    files = render(make_plan(profile, source), ctx)
    ansible_vars = yaml.safe_load(files["ansible/vars.yml"])
    assert ansible_vars["python_env_lock_src"] == f"/srv/rlinfra/clusters/c/{LOCK_FILE}"
    assert files[LOCK_FILE] == pin_sets()["cpu-sandbox"].lock_file.read_text()
    profile, source = load_profile("h100x1-ppo")
    files = render(make_plan(profile, source), ctx)
    ansible_vars = yaml.safe_load(files["ansible/vars.yml"])
    assert ansible_vars["python_env_lock_src"] == ""  # no lock for the GPU set made here
    assert ansible_vars["python_env_torch_backend"] == "cu126"
    assert LOCK_FILE not in files


def test_node_check_script_reads_lock_lines(tmp_path: Path) -> None:
    from importlib import metadata

    version = metadata.version("PyYAML")
    lock_file = tmp_path / "lock.txt"
    lock_file.write_text(f"# lock\npyyaml=={version} {HASH}\nno-such-dist==1.0 {HASH}\n")
    out = subprocess.run(
        [sys.executable, str(CHECK_REQUIREMENTS), str(lock_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out)["unsatisfied"] == ["no-such-dist==1.0: not installed"]


def test_node_check_script_finds_the_shared_cache_fill_marker(tmp_path: Path) -> None:
    # Nodes that share a uv cache install one after another until an install has filled the
    # cache with these exact requirements; its marker, named by the file's digest, says so.
    lock_file = tmp_path / "lock.txt"
    lock_file.write_text(f"no-such-dist==1.0 {HASH}\n")
    cache = tmp_path / "uv"
    cache.mkdir()

    def check() -> dict:
        out = subprocess.run(
            [
                sys.executable,
                str(CHECK_REQUIREMENTS),
                str(lock_file),
                "--fill-marker-dir",
                str(cache),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return dict(json.loads(out))

    first = check()
    digest = hashlib.sha256(f"no-such-dist==1.0 {HASH}".encode()).hexdigest()
    assert first["fill_marker"] == str(cache / f"rlinfra-filled-{digest}")
    assert first["cache_filled"] is False
    assert first["unsatisfied"] == ["no-such-dist==1.0: not installed"]
    Path(first["fill_marker"]).touch()
    assert check()["cache_filled"] is True
    # Comments (the template's header names the venv) do not change what goes into the cache.
    lock_file.write_text(f"# for /opt/other-venv\n\nno-such-dist==1.0 {HASH}\n# via x\n")
    assert check()["fill_marker"] == first["fill_marker"]
    lock_file.write_text(f"no-such-dist==2.0 {HASH}\n")  # another lock: not filled yet
    assert check()["cache_filled"] is False


def test_node_check_script_refuses_unknown_arguments(tmp_path: Path) -> None:
    lock_file = tmp_path / "lock.txt"
    lock_file.write_text("")
    done = subprocess.run(
        [sys.executable, str(CHECK_REQUIREMENTS), str(lock_file), "--fill"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "Usage: python check_requirements.py REQUIREMENTS_FILE" in done.stderr


def test_overrides_reach_the_compile_command_and_the_digest() -> None:
    pins = pin_sets()["cpu-sandbox"]
    assert "numpy>=2" in pins.overrides  # over verl 0.6.0's numpy<2
    argv = compile_argv("uv", pins, Path("req.in"), Path("out.txt"), overrides=Path("o.txt"))
    assert argv[argv.index("--override") + 1] == "o.txt"
    with pytest.raises(ValueError, match="overrides"):
        compile_argv("uv", pins, Path("req.in"), Path("out.txt"))
    assert pin_digest(dataclasses.replace(pins, overrides=())) != pin_digest(pins)
    assert "--override" not in compile_argv("uv", pin_sets()["verl-cu126"], Path("r"), Path("o"))
