"""ansible-lint (production profile) over ansible/, with skips only as local `# noqa` + reason."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"


def _ansible_lint() -> str:
    exe = Path(sys.executable).parent / "ansible-lint"
    return str(exe) if exe.exists() else (shutil.which("ansible-lint") or "ansible-lint")


def test_ansible_lint_production_profile_passes() -> None:
    config = yaml.safe_load((ANSIBLE / ".ansible-lint").read_text())
    assert config["profile"] == "production"
    assert not config.get("skip_list") and not config.get("warn_list")
    out = subprocess.run(
        [_ansible_lint(), "--offline", "--nocolor", "-q"],
        cwd=ANSIBLE,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_noqa_gives_a_reason() -> None:
    for path in ANSIBLE.rglob("*.yml"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.search(r"#\s*noqa\b(.*)", line)
            if match:
                assert re.search(r"[a-z-\[\]]+\s+-\s+\S", match.group(1)), (
                    f"{path}:{number}: noqa without a reason"
                )
