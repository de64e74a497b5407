"""Rendered HCL checked against the real provider's schema, where no provider binary exists.

The Google provider 6.50.0's schema ships in the npm package @cdktf/provider-google@16.12.1
(`package/.jsii`, generated from that provider's schema; camelCase names there, snake_case in HCL).
The package is fetched once into the test cache with `npm pack`, or from the registry's tarball
URL when npm is missing, checked against its published sha512, and reduced to a small JSON schema
kept next to it (under a file lock: two test processes fetch it once). ``schema_errors`` lists
every resource type, attribute, nested block and read that the provider does not have, and every
required attribute or block that is missing.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.hcl import is_block_list, labelled, parse_hcl, unquote
from helpers.locks import file_lock
from helpers.paths import cache_root
from helpers.terraform import run

# The provider schema the modules are checked against, and where it comes from.
PROVIDER_VERSION = "6.50.0"
NPM_PACKAGE = "@cdktf/provider-google"
NPM_VERSION = "16.12.1"
NPM_TARBALL_URL = "https://registry.npmjs.org/@cdktf/provider-google/-/provider-google-16.12.1.tgz"
# dist.integrity of @cdktf/provider-google@16.12.1 as the npm registry publishes it.
NPM_TARBALL_SHA512 = (
    "KqNA/5RiFT07r0PSZ6/07cJ2zESUgbj1JchVj21iBFBZVUbD+578xA/k8eq/r0cbyEgLmg9eYWeVslaYah4DCQ=="
)
SCHEMA_FORMAT = 1  # bump when the reduced schema's shape changes


def cache_dir() -> Path:
    return cache_root() / f"cdktf-provider-google-{NPM_VERSION}"


def sha512_b64(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return base64.b64encode(digest.digest()).decode()


def fetch_tarball(folder: Path) -> tuple[Path | None, list[str]]:
    """The package tarball in the cache: `npm pack` when npm is on PATH, else the registry's
    tarball URL with urllib. Returns (path or None, what went wrong)."""
    tarball = folder / f"cdktf-provider-google-{NPM_VERSION}.tgz"
    if tarball.exists() and sha512_b64(tarball) == NPM_TARBALL_SHA512:
        return tarball, []
    folder.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        download = Path(tmp) / "package.tgz"
        npm = shutil.which("npm")
        if npm:
            env = {
                **os.environ,
                "npm_config_cache": str(Path(tmp) / "npm-cache"),
                "npm_config_update_notifier": "false",
                "npm_config_fund": "false",
                "npm_config_audit": "false",
            }
            result = run(
                [npm, "pack", f"{NPM_PACKAGE}@{NPM_VERSION}", "--pack-destination", tmp],
                cwd=tmp,
                env=env,
                timeout=600,
            )
            packed = sorted(Path(tmp).glob("cdktf-provider-google-*.tgz"))
            if result.returncode == 0 and packed:
                packed[0].replace(download)
            else:
                problems.append(f"npm pack exited {result.returncode}: {result.stderr[-500:]}")
        if not download.exists():
            try:
                with (
                    urllib.request.urlopen(NPM_TARBALL_URL, timeout=120) as response,
                    download.open("wb") as out,
                ):
                    shutil.copyfileobj(response, out)
            except OSError as exc:
                problems.append(f"GET {NPM_TARBALL_URL}: {exc}")
                return None, problems
        actual = sha512_b64(download)
        if actual != NPM_TARBALL_SHA512:
            pytest.fail(f"{NPM_PACKAGE}@{NPM_VERSION}: sha512 {actual} is not the published one")
        os.replace(download, tarball)  # atomic: a parallel run sees the old state or this one
    return tarball, problems


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def hcl_names(prop: dict[str, Any]) -> set[str]:
    """HCL names of one jsii property. Mostly its camelCase name in snake_case; the registry link
    in its docs names it exactly where the two differ (e.g. vlan_tag8021q); cdktf renames a few
    that clash with its own members ("buildAttribute" for build)."""
    names = {snake(prop["name"])}
    anchor = re.search(r"#([a-z][a-z0-9_]*) ", prop.get("docs", {}).get("remarks", ""))
    if anchor:
        names.add(anchor.group(1))
    if prop["name"].endswith("Attribute"):
        names.add(snake(prop["name"][: -len("Attribute")]))
    return names


def provider_fqn(type_ref: dict[str, Any]) -> str | None:
    """The provider type a property refers to (a struct, list or output reference), if any."""
    if type_ref.get("fqn", "").startswith(NPM_PACKAGE + "."):
        return str(type_ref["fqn"])
    for option in type_ref.get("union", {}).get("types", []):
        found = provider_fqn(option)
        if found:
            return found
    element = type_ref.get("collection", {}).get("elementtype")
    return provider_fqn(element) if element else None


def reduce_jsii(assembly: dict[str, Any]) -> dict[str, Any]:
    """A small schema: for each resource, data source and the provider, its writable attributes
    (required or not) and nested blocks, recursively, and what an expression may read."""
    types: dict[str, Any] = assembly["types"]

    def block(struct_fqn: str, depth: int = 0) -> dict[str, Any]:
        attrs: dict[str, bool] = {}
        blocks: dict[str, Any] = {}
        for prop in types[struct_fqn].get("properties", []):
            required = not prop.get("optional", False)
            nested = provider_fqn(prop["type"])
            for name in hcl_names(prop):
                if nested and types.get(nested, {}).get("datatype") and depth < 12:
                    blocks[name] = {"required": required, "schema": block(nested, depth + 1)}
                else:
                    attrs[name] = required
        return {"attrs": attrs, "blocks": blocks}

    def reads(class_fqn: str, depth: int = 0) -> dict[str, Any]:
        props = [p for p in types[class_fqn].get("properties", []) if not p.get("static")]
        own = {p["name"] for p in props}
        out: dict[str, Any] = {}
        for prop in props:
            name = prop["name"]
            if name == "internalValue" or (name.endswith("Input") and name[:-5] in own):
                continue
            target = provider_fqn(prop["type"])
            if target and target in types and depth < 12:
                getter = next(
                    (m for m in types[target].get("methods", []) if m["name"] == "get"), None
                )
                if getter:  # a list or map of nested objects: its elements
                    target = provider_fqn(getter.get("returns", {}).get("type", {}))
            sub = reads(target, depth + 1) if target in types and depth < 12 else None
            for hcl in hcl_names(prop):
                out[hcl] = sub
        return out

    schema: dict[str, Any] = {
        "format": SCHEMA_FORMAT,
        "package": f"{NPM_PACKAGE}@{NPM_VERSION}",
        "provider_version": None,
        "resource": {},
        "data": {},
        "provider": None,
    }
    link = re.compile(
        r"hashicorp/google/(\d+\.\d+\.\d+)/docs/(resources|data-sources)/\w+ (google_\w+)\}"
    )
    for fqn, spec in types.items():
        base = spec.get("base")
        if spec.get("kind") != "class":
            continue
        if base == "cdktf.TerraformProvider":
            schema["provider"] = block(fqn + "Config")
            continue
        if base not in ("cdktf.TerraformResource", "cdktf.TerraformDataSource"):
            continue
        found = link.search(spec.get("docs", {}).get("summary", ""))
        if not found or fqn + "Config" not in types:
            continue
        version, kind, tf_type = found.groups()
        schema["provider_version"] = version
        entry = block(fqn + "Config")
        entry["reads"] = reads(fqn)
        schema["resource" if kind == "resources" else "data"][tf_type] = entry
    return schema


META = {
    "resource": {
        "count",
        "for_each",
        "depends_on",
        "provider",
        "lifecycle",
        "provisioner",
        "connection",
    },
    "data": {"count", "for_each", "depends_on", "provider", "lifecycle"},
    "provider": {"alias"},
}


def suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_body(
    body: dict[str, Any], spec: dict[str, Any], where: str, meta: set[str], errors: list[str]
) -> None:
    """Attributes and blocks of one HCL body against one schema block."""
    attrs, blocks = spec["attrs"], spec["blocks"]
    seen: set[str] = set()
    for key, value in body.items():
        if key.startswith("__") or key in meta:
            continue
        if key == "dynamic":
            for dynamic in value:
                for label, dyn_body in dynamic.items():
                    if label.startswith("__"):
                        continue
                    name = unquote(label)
                    if name not in blocks:
                        errors.append(f"{where}: no block {name!r}{suggest(name, blocks)}")
                        continue
                    seen.add(name)
                    for content in dyn_body.get("content", []):
                        check_body(
                            content, blocks[name]["schema"], f"{where}.{name}", set(), errors
                        )
            continue
        if is_block_list(value):
            if key not in blocks:
                kind = "an attribute, not a block" if key in attrs else "no such block"
                errors.append(f"{where}: {key!r} is {kind}{suggest(key, blocks)}")
                continue
            seen.add(key)
            for item in value:
                check_body(item, blocks[key]["schema"], f"{where}.{key}", set(), errors)
        elif key in attrs:
            seen.add(key)
        elif key in blocks:
            errors.append(f"{where}: {key!r} is a block: write {key} {{ ... }}")
        else:
            known = list(attrs) + list(blocks)
            errors.append(f"{where}: no attribute {key!r}{suggest(key, known)}")
    for name, required in attrs.items():
        if required and name not in seen:
            errors.append(f"{where}: required attribute {name!r} is missing")
    for name, block in blocks.items():
        if block["required"] and name not in seen:
            errors.append(f"{where}: required block {name!r} is missing")


STEP = re.compile(r"\.([a-z_][a-z0-9_]*)|\[[^\[\]]*\]|\.\*")
DIRECT_REF = re.compile(
    r"(?<![\w.])(data\.)?(google_[a-z0-9_]+)\.([a-z_][a-z0-9_-]*)"
    r"((?:\[[^\[\]]*\]|\.[a-z_][a-z0-9_]*|\.\*)*)"
)
FOR_BINDING = re.compile(
    r"\bfor\s+(?:[a-z_]\w*\s*,\s*)?([a-z_]\w*)\s+in\s+(data\.)?(google_[a-z0-9_]+)\.([a-z_][a-z0-9_-]*)\s*:"
)


def strings_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings_in(value)


def check_path(reads: dict[str, Any] | None, path: str, where: str, errors: list[str]) -> None:
    """Walk `.attr[0].nested` through what the provider lets an expression read."""
    current = reads
    for step in STEP.finditer(path):
        name = step.group(1)
        if name is None:  # an index or a splat
            continue
        if current is None:  # a primitive, a map or a JSON value: nothing more to check
            return
        if name not in current:
            errors.append(f"{where}: cannot read {name!r}{suggest(name, current)}")
            return
        current = current[name]


def check_references(
    parsed: dict[str, Any],
    declared: set[tuple[str, str, str]],
    schema: dict[str, Any],
    where: str,
    errors: list[str],
) -> None:
    for text in strings_in(parsed):
        found: list[tuple[str, str, str, str]] = []
        for match in DIRECT_REF.finditer(text):
            kind = "data" if match.group(1) else "resource"
            found.append((kind, match.group(2), match.group(3), match.group(4)))
        for binding in FOR_BINDING.finditer(text):
            kind = "data" if binding.group(2) else "resource"
            var = binding.group(1)
            for use in re.finditer(rf"(?<![\w.]){var}((?:\[[^\[\]]*\]|\.[a-z_][a-z0-9_]*)+)", text):
                found.append((kind, binding.group(3), binding.group(4), "[0]" + use.group(1)))
        for kind, tf_type, name, path in found:
            entry = schema[kind].get(tf_type)
            label = f"{where}: {'data.' if kind == 'data' else ''}{tf_type}.{name}"
            if entry is None:
                errors.append(f"{label}: no {kind} type {tf_type!r}")
            elif (kind, tf_type, name) not in declared:
                errors.append(f"{label}: not declared in this module")
            else:
                check_path(entry["reads"], path, label, errors)


def schema_errors(files: dict[str, str], schema: dict[str, Any]) -> list[str]:
    """Everything in one module's files ({name: text}) that the provider schema does not have."""
    errors: list[str] = []
    parsed = {name: parse_hcl(text) for name, text in files.items()}
    declared: set[tuple[str, str, str]] = set()
    for name, tree in parsed.items():
        for kind in ("resource", "data"):
            for (tf_type, label), body in labelled(tree, kind):
                declared.add((kind, tf_type, label))
                where = f"{name}: {'data.' if kind == 'data' else ''}{tf_type}.{label}"
                entry = schema[kind].get(tf_type)
                if entry is None:
                    known = schema[kind]
                    errors.append(f"{where}: no {kind} type {tf_type!r}{suggest(tf_type, known)}")
                    continue
                check_body(body, entry, where, META[kind], errors)
        for (provider,), body in labelled(tree, "provider"):
            if provider == "google":
                check_body(
                    body, schema["provider"], f"{name}: provider.google", META["provider"], errors
                )
    for name, tree in parsed.items():
        check_references(tree, declared, schema, name, errors)
    return errors


def google_schema() -> dict[str, Any]:
    """The reduced Google provider schema: from the cache, or fetched and reduced once."""
    folder = cache_dir()
    reduced = folder / f"google-{PROVIDER_VERSION}-schema.json"
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if reduced.exists():
            with contextlib.suppress(ValueError):
                cached: dict[str, Any] = json.loads(reduced.read_text())
                if cached.get("format") == SCHEMA_FORMAT:
                    return cached
        tarball, problems = fetch_tarball(folder)
        if tarball is None:
            pytest.skip(
                f"{NPM_PACKAGE}@{NPM_VERSION} could not be fetched (no registry here?): "
                + "; ".join(problems)
            )
        with tarfile.open(tarball, "r:gz") as archive:
            member = archive.extractfile("package/.jsii")
            assert member is not None, "package/.jsii is missing from the tarball"
            assembly = json.load(member)
        assert assembly["name"] == NPM_PACKAGE and assembly["version"] == NPM_VERSION
        schema = reduce_jsii(assembly)
        tmp = reduced.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(schema))
        os.replace(tmp, reduced)
        return schema
