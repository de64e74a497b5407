"""Verl's own configuration, as data: every key of the pinned release's PPO trainer config.

The key tree is generated from the real wheel's packaged Hydra config
(``verl/trainer/config/_generated_ppo_trainer.yaml``, the fully composed ``ppo_trainer`` that
``python -m verl.trainer.main_ppo`` starts from) and shipped in ``rlinfra/data/verl/<version>.json``,
so checking a profile needs no Verl install. Regenerate it with::

    pip install --no-deps verl==<version>
    python -m rlinfra.workloads --write

Why 0.6.0: the reference recipes pin Verl commit 83aebcc (with vLLM 0.10.0, and a
``verl0.6 ... sglang0.5.2`` image). Of the releases on PyPI, 0.5.0 lacks keys those recipes set
(``actor_rollout_ref.actor.fsdp_config.model_dtype``, ``critic.model.fsdp_config.model_dtype``);
0.6.0 and 0.6.1 have every one of them, and 0.6.0 is the release whose ``sglang`` extra pins
sglang 0.5.2, the version of the reference's image. 0.6.1 moved on to sglang 0.5.5.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

VERL_VERSION = "0.6.0"
CONFIG_FILE = "verl/trainer/config/_generated_ppo_trainer.yaml"
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "verl"

# Kinds a key can have, from the type of its default value.
MAPPING = "mapping"
_KINDS = ("mapping", "list", "bool", "int", "float", "str", "null")

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$", re.IGNORECASE)
_BOOL = {"true", "false"}


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if value is None:
        return "null"
    return "str"


def key_tree(config: Mapping[str, Any]) -> dict[str, str]:
    """Every dotted key of a parsed config (sections too), mapped to the kind of its default."""
    out: dict[str, str] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            out[key] = _kind(value)
            if isinstance(value, Mapping):
                walk(value, key)

    walk(config, "")
    return dict(sorted(out.items()))


def snapshot(config_text: str, version: str) -> dict[str, Any]:
    """The JSON document shipped for one Verl release."""
    import yaml

    parsed = yaml.safe_load(config_text)
    if not isinstance(parsed, Mapping):
        raise ValueError(f"{CONFIG_FILE} of verl {version} is not a mapping")
    return {"verl_version": version, "source": CONFIG_FILE, "keys": key_tree(parsed)}


def installed_config() -> tuple[str, str]:
    """(version, config text) of the verl distribution installed here, without importing it.

    Importing verl pulls torch; reading the file from the distribution does not.
    """
    from importlib import metadata

    dist = metadata.distribution("verl")
    path = Path(str(dist.locate_file(CONFIG_FILE)))
    return dist.version, path.read_text()


@dataclass(frozen=True)
class VerlConfig:
    """The keys of one Verl release's trainer config."""

    version: str
    keys: Mapping[str, str]

    def children(self, parent: str) -> list[str]:
        prefix = parent + "."
        return [
            k[len(prefix) :]
            for k in self.keys
            if k.startswith(prefix) and "." not in k[len(prefix) :]
        ]

    def closest(self, key: str) -> str | None:
        """The real key a mistyped one most likely meant."""
        parent, _, leaf = key.rpartition(".")
        if parent in self.keys:
            close = difflib.get_close_matches(leaf, self.children(parent), n=1, cutoff=0.6)
            if close:
                return f"{parent}.{close[0]}"
        close = difflib.get_close_matches(key, list(self.keys), n=1, cutoff=0.75)
        if close:
            return close[0]
        # A right leaf under a wrong section: actor_rollout_ref.optim.lr -> ...actor.optim.lr
        same_leaf = [k for k in self.keys if k.endswith("." + leaf) or k == leaf]
        close = difflib.get_close_matches(key, same_leaf, n=1, cutoff=0.5)
        return close[0] if close else None


@cache
def verl_config(version: str = VERL_VERSION) -> VerlConfig:
    path = DATA_DIR / f"{version}.json"
    if not path.is_file():
        known = sorted(p.stem for p in DATA_DIR.glob("*.json"))
        raise ValueError(f"no Verl config snapshot for {version} (have: {', '.join(known)})")
    data = json.loads(path.read_text())
    return VerlConfig(version=data["verl_version"], keys=dict(data["keys"]))


def split_hydra_key(raw: str) -> tuple[str, str]:
    """``++a.b`` -> ("++", "a.b"); ``+a.b`` -> ("+", ...); ``~a.b`` -> ("~", ...); else ("", ...)."""
    for prefix in ("++", "+", "~"):
        if raw.startswith(prefix):
            return prefix, raw[len(prefix) :]
    return "", raw


def value_problem(kind: str, value: str) -> str | None:
    """Why ``value`` (override text) cannot be the value of a key whose default is ``kind``."""
    text = value.strip()
    if "${" in text or text.lower() == "null":
        return None  # an OmegaConf interpolation, or an explicit null: Verl decides
    # An int default (entropy_coeff: 0) may still take a fraction: only non-numbers are refused.
    if kind in ("int", "float") and not (_INT.match(text) or _FLOAT.match(text)):
        return f"{value!r} is not a number"
    if kind == "bool" and text.lower() not in _BOOL:
        return f"{value!r} is not True or False"
    if kind == "list" and not (text.startswith("[") and text.endswith("]")):
        return f"{value!r} is not a list (write [a,b])"
    if kind == "mapping" and not (text.startswith("{") and text.endswith("}")):
        return "is a section of the config, not a value (set one of its keys instead)"
    return None


def check_key(config: VerlConfig, raw_key: str, value: str) -> tuple[str, str | None] | None:
    """(problem, hint) for one override, or None when Hydra would take it.

    Hydra's grammar: ``key=v`` overrides an existing key, ``+key=v`` adds a new one (an error if
    it exists), ``++key=v`` adds or overrides, ``~key`` deletes an existing one.
    """
    prefix, key = split_hydra_key(raw_key)
    exists = key in config.keys
    label = f"Verl {config.version}"
    if prefix == "++":
        return None
    if prefix == "+":
        if exists:
            return (
                f"already a {label} config key; '+' only adds new keys",
                f"Write {key} (override) or ++{key} (add or override).",
            )
        return None
    if not exists:
        close = config.closest(key)
        hint = f"Did you mean {close}?" if close else "Prefix it with '+' to add a new key."
        return f"not a {label} config key", hint
    if prefix == "~":
        return None
    problem = value_problem(config.keys[key], value)
    if problem:
        return f"{problem} (the {label} default is a {config.keys[key]})", None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra.workloads",
        description="Generate rlinfra's snapshot of Verl's trainer config keys from the installed "
        "verl package (pip install --no-deps verl==VERSION).",
    )
    parser.add_argument("--write", action="store_true", help="write rlinfra/data/verl/<ver>.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped one differs")
    args = parser.parse_args(argv)
    version, text = installed_config()
    doc = snapshot(text, version)
    rendered = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    target = DATA_DIR / f"{version}.json"
    if args.check:
        same = target.is_file() and target.read_text() == rendered
        print(f"{target}: {'up to date' if same else 'differs from verl ' + version}")
        return 0 if same else 1
    if args.write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rendered)
        print(f"wrote {target} ({len(doc['keys'])} keys of verl {version})")
        return 0
    sys.stdout.write(rendered)
    return 0
