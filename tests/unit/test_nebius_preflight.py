"""The nebius cloud's catalog and preflight.

No Nebius API emulator exists, so the preflight runs against a loopback gRPC server of this
test's own (``LoopbackNebiusApi``) that serves the real services' method names with the SDK's
own message types (``nebius.api.nebius.*``): iam.v2 ProjectService/Get, compute.v1
PlatformService/List, quotas.v1 QuotaAllowanceService/GetByName, vpc.v1 SubnetService/Get, and
iam.v1 TokenExchangeService/Exchange for service account credentials. Everything on the client
side is real: the official SDK (``nebius``) finds no other address than the server's
(RLINFRA_NEBIUS_API_ENDPOINT), signs a service account's JWT, exchanges it, and carries the
token on every call. The catalog tests read the packaged YAML.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from helpers.nebius_api import (
    H100,
    H100X8,
    KEY_ID,
    OTHER_PROJECT,
    PROJECT,
    QUOTA_H100,
    SA_TOKEN,
    SERVICE_ACCOUNT,
    SUBNET,
    TENANT,
    TOKEN,
    LoopbackNebiusApi,
    LoopbackState,
)
from rlinfra.accelerators import Accelerator
from rlinfra.clouds.nebius import preflight
from rlinfra.clouds.nebius.catalog import (
    CATALOG_PATH,
    choose,
    load_catalog,
    parse_catalog,
)
from rlinfra.errors import EXIT_USAGE, UsageError


@pytest.fixture
def nebius_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackNebiusApi]:
    for name in ("http_proxy", "https_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    api = LoopbackNebiusApi()
    yield api
    api.close()


def environ_for(
    tmp_path: Path, api: LoopbackNebiusApi, token: str | None = TOKEN, **more: str
) -> dict[str, str]:
    """An rlinfra run's environment: a HOME without Nebius files, the API on the loopback
    server, and the IAM token (or none)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), preflight.API_ENDPOINT_ENV: api.address, **more}
    if token is not None:
        env[preflight.TOKEN_ENV] = token
    return env


def run_check(env: dict[str, str], **changes: Any) -> preflight.Report:
    args: dict[str, Any] = {
        "project_id": PROJECT,
        "region": "eu-north1",
        "platform": H100,
        "preset": H100X8,
        "node_count": 2,
        "subnet_id": SUBNET,
        "spot": False,
        **changes,
    }
    return preflight.check(**args, environ=env, timeout=10)


def service_account_file(folder: Path, api: LoopbackNebiusApi) -> Path:
    """A service account credentials file (the JSON `nebius iam auth-public-key generate`
    writes) with a fresh key, whose public half the loopback server verifies."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    api.state.public_key = key.public_key()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    subject = {"alg": "RS256", "private-key": pem, "kid": KEY_ID}
    subject |= {"iss": SERVICE_ACCOUNT, "sub": SERVICE_ACCOUNT}
    path = folder / "sa-credentials.json"
    path.write_text(json.dumps({"subject-credentials": subject}))
    path.chmod(0o600)
    return path


def key_of(path: Path) -> Any:
    """The public key of a service account credentials file's private key."""
    pem = json.loads(path.read_text())["subject-credentials"]["private-key"]
    return serialization.load_pem_private_key(pem.encode(), password=None).public_key()


# --- the preflight against the loopback server ----------------------------------------------------


def test_loopback_nebius_api_a_ready_project_passes_with_the_token_on_every_call(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    report = run_check(environ_for(tmp_path, nebius_api))
    assert nebius_api.methods() == [
        "iam.v2.ProjectService/Get",
        "compute.v1.PlatformService/List",
        "compute.v1.PlatformService/List",  # one platform per page: the next page is read
        "quotas.v1.QuotaAllowanceService/GetByName",
        "vpc.v1.SubnetService/Get",
    ]
    assert all(auth == f"Bearer {TOKEN}" for _, auth in nebius_api.state.calls)
    assert report.credentials == preflight.TOKEN_ENV and report.warnings == ()
    assert report.quota == preflight.Quota(QUOTA_H100, PROJECT, 32, 0, 16)
    assert {f"{H100}/{H100X8}", "cpu-d3/4vcpu-16gb"} <= report.offered
    # Nothing was written with the token in it.
    written = [p for p in tmp_path.rglob("*") if p.is_file() and TOKEN in p.read_text()]
    assert written == []


def test_loopback_nebius_api_cpu_preset_checks_no_gpu_quota_and_no_subnet_when_none(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    nebius_api.state.quotas.clear()
    report = run_check(
        environ_for(tmp_path, nebius_api), platform="cpu-d3", preset="4vcpu-16gb", subnet_id=None
    )
    assert report.quota is None
    assert "quotas.v1.QuotaAllowanceService/GetByName" not in nebius_api.methods()
    assert "vpc.v1.SubnetService/Get" not in nebius_api.methods()


def test_loopback_nebius_api_tenant_quota_and_gpus_in_use_warn(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    # No allowance of the project's own: its tenant's counts; 8 of 16 in use leaves 8 of 16.
    nebius_api.state.quotas = {(TENANT, QUOTA_H100, "eu-north1"): (16, 8, "STATE_ACTIVE")}
    report = run_check(environ_for(tmp_path, nebius_api))
    assert report.quota == preflight.Quota(QUOTA_H100, TENANT, 16, 8, 16)
    (warning,) = report.warnings
    assert f"GPU quota {QUOTA_H100} of {TENANT} in eu-north1: 8 of 16 in use, 16 needed" in warning
    assert nebius_api.methods().count("quotas.v1.QuotaAllowanceService/GetByName") == 2


REFUSALS: dict[str, tuple[Callable[[LoopbackState], None], dict[str, Any], str]] = {
    "unknown_project": (
        lambda s: None,
        {"project_id": OTHER_PROJECT},
        f"Nebius project '{OTHER_PROJECT}' was not found, or NEBIUS_IAM_TOKEN may not see it",
    ),
    "project_in_another_region": (
        lambda s: None,
        {"region": "eu-west1"},
        f"Nebius project {PROJECT} is in region eu-north1, not eu-west1",
    ),
    "platform_not_in_region": (
        lambda s: s.platforms.pop(H100),
        {},
        f"platform {H100} is not offered in region eu-north1 (project {PROJECT} offers: cpu-d3)",
    ),
    "preset_not_in_region": (
        lambda s: s.platforms[H100].presets.pop(H100X8),
        {},
        f"platform {H100} in region eu-north1 has no preset {H100X8}",
    ),
    "preemptible_not_allowed": (
        lambda s: setattr(s.platforms[H100], "preemptible", False),
        {"spot": True},
        f"platform {H100} does not allow preemptible VMs in region eu-north1",
    ),
    "quota_short": (
        lambda s: s.quotas.update({(PROJECT, QUOTA_H100, "eu-north1"): (8, 0, "STATE_ACTIVE")}),
        {},
        f"GPU quota {QUOTA_H100} of {PROJECT} in eu-north1 is 8, but 2 x {H100}/{H100X8} need "
        "16 GPUs",
    ),
    "no_quota_at_all": (
        lambda s: s.quotas.clear(),
        {"node_count": 1},
        f"GPU quota {QUOTA_H100} in eu-north1: neither project {PROJECT} nor its tenant {TENANT} "
        f"has an allowance, but 1 x {H100}/{H100X8} need 8 GPUs",
    ),
    "quota_frozen": (
        lambda s: s.quotas.update({(PROJECT, QUOTA_H100, "eu-north1"): (64, 0, "STATE_FROZEN")}),
        {},
        f"GPU quota {QUOTA_H100} of {PROJECT} in eu-north1 is frozen",
    ),
    "subnet_missing": (
        lambda s: s.subnets.clear(),
        {},
        f"subnet '{SUBNET}' does not exist, or NEBIUS_IAM_TOKEN may not see it",
    ),
    "subnet_of_another_project": (
        lambda s: s.subnets.update({SUBNET: OTHER_PROJECT}),
        {},
        f"subnet {SUBNET} belongs to project {OTHER_PROJECT}, not {PROJECT}",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_loopback_nebius_api_each_refusal_is_one_line_and_exit_2(
    tmp_path: Path, nebius_api: LoopbackNebiusApi, case: str
) -> None:
    change, args, fragment = REFUSALS[case]
    change(nebius_api.state)
    with pytest.raises(UsageError) as caught:
        run_check(environ_for(tmp_path, nebius_api), **args)
    error = caught.value
    assert error.exit_code == EXIT_USAGE
    assert fragment in error.message, error.message
    assert "\n" not in error.message and "\n" not in (error.hint or "")
    assert error.hint  # says what to do


def test_loopback_nebius_api_no_credentials_is_refused_before_any_call(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    with pytest.raises(UsageError) as caught:
        run_check(environ_for(tmp_path, nebius_api, token=None))
    error = caught.value
    assert error.exit_code == EXIT_USAGE and "\n" not in error.message
    assert error.message.startswith("no Nebius credentials found (NEBIUS_IAM_TOKEN, ")
    assert "nebius profile create" in (error.hint or "")
    assert nebius_api.state.calls == []
    # A blank token is no token either.
    with pytest.raises(UsageError, match="no Nebius credentials found"):
        run_check(environ_for(tmp_path, nebius_api, token="  "))
    assert nebius_api.state.calls == []


def test_loopback_nebius_api_a_refused_token_names_where_it_came_from(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    with pytest.raises(UsageError) as caught:
        run_check(environ_for(tmp_path, nebius_api, token="v1.expired"))
    error = caught.value
    assert error.exit_code == EXIT_USAGE and "\n" not in error.message
    assert error.message.startswith(
        "Nebius did not accept the credentials (NEBIUS_IAM_TOKEN) to read project "
    )
    assert "v1.expired" not in error.message
    assert nebius_api.methods() == ["iam.v2.ProjectService/Get"]


def test_loopback_nebius_api_service_account_file_is_exchanged_for_a_token(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    path = service_account_file(tmp_path, nebius_api)
    env = environ_for(
        tmp_path, nebius_api, token=None, **{preflight.CREDENTIALS_FILE_ENV: str(path)}
    )
    report = run_check(env)
    assert report.credentials == f"the credentials file {path}"
    # The key's JWT is exchanged first (the SDK may ask twice as it starts), then every call
    # carries the token it was given.
    exchange = "iam.v1.TokenExchangeService/Exchange"
    calls = nebius_api.state.calls
    first = next(i for i, (method, _) in enumerate(calls) if method != exchange)
    assert first >= 1 and all(method == exchange for method, _ in calls[:first])
    assert [method for method, _ in calls[first : first + 2]] == [
        "iam.v2.ProjectService/Get",
        "compute.v1.PlatformService/List",
    ]
    assert all(auth == f"Bearer {SA_TOKEN}" for _, auth in calls[first:])
    assert exchange not in nebius_api.methods()[first:]
    # A key the token service does not know: refused at the exchange, as one line, at once.
    nebius_api.state.calls.clear()
    other = service_account_file(tmp_path / "home", nebius_api)
    nebius_api.state.public_key = rsa.generate_private_key(65537, 2048).public_key()
    with pytest.raises(UsageError) as caught:
        run_check({**env, preflight.CREDENTIALS_FILE_ENV: str(other)})
    assert caught.value.message.startswith(
        f"Nebius did not accept the credentials (the credentials file {other}) to read project "
    )
    assert "\n" not in caught.value.message
    assert set(nebius_api.methods()) == {"iam.v1.TokenExchangeService/Exchange"}
    # The same file where SkyPilot's setup writes it, ~/.nebius/credentials.json, is found too.
    default = Path(env["HOME"]) / ".nebius" / "credentials.json"
    default.parent.mkdir()
    default.write_text(path.read_text())
    nebius_api.state.public_key = key_of(path)
    del env[preflight.CREDENTIALS_FILE_ENV]
    assert run_check(env).credentials == f"the credentials file {default}"


def test_loopback_nebius_api_cli_profile_is_used_and_a_browser_profile_is_refused(
    tmp_path: Path, nebius_api: LoopbackNebiusApi
) -> None:
    path = service_account_file(tmp_path, nebius_api)
    env = environ_for(tmp_path, nebius_api, token=None)
    config = Path(env["HOME"]) / ".nebius" / "config.yaml"
    config.parent.mkdir()
    profiles = {
        "sa": {
            "endpoint": "api.nebius.cloud",
            "auth-type": "service account",
            "service-account-credentials-file-path": str(path),
            "parent-id": OTHER_PROJECT,  # not used: every request names its parent
        },
        "me": {
            "endpoint": "api.nebius.cloud",
            "auth-type": "federation",
            "federation-endpoint": "auth.nebius.com",
            "federation-id": "federation-e00x",
        },
    }
    config.write_text(yaml.safe_dump({"default": "me", "profiles": profiles}))
    with pytest.raises(UsageError) as caught:
        run_check(env)
    assert caught.value.message.startswith("Nebius CLI profile 'me' signs in through a browser")
    assert nebius_api.state.calls == []
    env[preflight.PROFILE_ENV] = "sa"
    report = run_check(env)
    assert report.credentials == f"Nebius CLI profile 'sa' ({config})"
    assert nebius_api.methods()[0] == "iam.v1.TokenExchangeService/Exchange"
    env[preflight.PROFILE_ENV] = "nobody"
    with pytest.raises(UsageError, match="Nebius CLI profile 'nobody' is not in"):
        run_check(env)


def test_credentials_and_endpoint_are_read_from_the_given_environment_only(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), preflight.CREDENTIALS_FILE_ENV: str(tmp_path / "missing.json")}
    with pytest.raises(UsageError, match=r"RLINFRA_NEBIUS_CREDENTIALS_FILE names .*missing.json"):
        preflight.find_credentials(env)
    assert preflight.endpoint_from({}) == preflight.Endpoint()
    assert preflight.endpoint_from({preflight.API_ENDPOINT_ENV: "127.0.0.1:5"}).plaintext
    assert preflight.endpoint_from({preflight.API_ENDPOINT_ENV: "[::1]:5"}).plaintext
    remote = preflight.endpoint_from({preflight.API_ENDPOINT_ENV: "api.example.net:443"})
    assert remote == preflight.Endpoint("api.example.net:443", plaintext=False)
    with pytest.raises(UsageError, match="is not host:port"):
        preflight.endpoint_from({preflight.API_ENDPOINT_ENV: "http://127.0.0.1"})


def test_rlinfra_help_and_the_nebius_modules_import_no_sdk() -> None:
    code = (
        "import sys\n"
        "import rlinfra.clouds.nebius.preflight, rlinfra.clouds.nebius.catalog\n"
        "from rlinfra import cli\n"
        "sys.argv = ['rlinfra', '--help']\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('nebius', 'grpc'))\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr, done.stderr


# --- the catalog ----------------------------------------------------------------------------------

PRESET_NAME = re.compile(r"(?:(\d+)gpu-)?(\d+)vcpu-(\d+)gb")


def raw_catalog() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CATALOG_PATH.read_text())
    return data


def test_catalog_parses_dated_with_sources_and_every_region_listed() -> None:
    catalog = load_catalog()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", catalog.as_of) and catalog.currency == "USD"
    assert any("skypilot-catalog" in s and "nebius/vms.csv" in s for s in catalog.sources)
    assert any("docs.nebius.com" in s for s in catalog.sources)
    assert {"eu-north1", "eu-west1", "us-central1"} <= set(catalog.regions)
    assert catalog.image_families["gpu"] == "ubuntu22.04-cuda12"
    for key in (f"{H100}/1gpu-16vcpu-200gb", f"{H100}/{H100X8}", "gpu-h200-sxm/" + H100X8):
        assert key in catalog.entries, key
    b200 = catalog.get("gpu-b200-sxm/8gpu-160vcpu-1792gb")
    assert b200.regions == ("us-central1",) and b200.prices["us-central1"].on_demand == 44.0
    assert catalog.cpu_types(), "CPU-only presets (e.g. a retrieval server)"


def test_catalog_entries_gpus_agree_with_preset_and_platform_names() -> None:
    for key, entry in raw_catalog()["presets"].items():
        assert key == f"{entry['platform']}/{entry['preset']}", key
        found = PRESET_NAME.fullmatch(entry["preset"])
        assert found, key
        gpus, vcpus, memory = (int(found.group(i) or 0) for i in (1, 2, 3))
        assert (entry["gpus"], entry["vcpus"], entry["memory_gib"]) == (gpus, vcpus, memory), key
        model = re.fullmatch(r"gpu-([a-z0-9]+)-.+", entry["platform"])
        if model:
            assert entry["accelerator"] == f"{model.group(1).upper()}:{gpus}", key
            assert entry["gpu"].startswith(f"NVIDIA {model.group(1).upper()} "), key
        else:
            assert entry["platform"].startswith("cpu-") and gpus == 0, key
            assert "accelerator" not in entry, key
        for region, price in entry["prices"].items():
            assert price["on_demand"] > 0, key
            assert price["spot"] is None or 0 < price["spot"] < price["on_demand"], (key, region)


def test_catalog_fabrics_only_for_8_gpu_presets_and_per_platform_and_region() -> None:
    entries = raw_catalog()["presets"]
    with_fabrics = {key: e["fabrics"] for key, e in entries.items() if e.get("fabrics")}
    assert all(entries[key]["gpus"] == 8 for key in with_fabrics), with_fabrics
    assert with_fabrics[f"{H100}/{H100X8}"] == {
        "eu-north1": ["fabric-2", "fabric-3", "fabric-4", "fabric-6"]
    }
    h200 = with_fabrics[f"gpu-h200-sxm/{H100X8}"]
    assert h200["eu-north1"] == ["fabric-7"] and h200["eu-west1"] == ["fabric-5"]
    for key, fabrics in with_fabrics.items():
        assert set(fabrics) <= set(entries[key]["prices"]), key

    # A 1-GPU preset with a fabric is refused by the parser, as are a fabric where the preset is
    # not sold and a name that disagrees with the entry.
    def parse_one(key: str, **changes: Any) -> None:
        frame = {"as_of": "x", "regions": ["eu-north1", "eu-west1"]}
        presets = {key: {**entries[key], **changes}}
        parse_catalog({**frame, "image_families": {"gpu": "g", "cpu": "c"}, "presets": presets})

    one, eight = f"{H100}/1gpu-16vcpu-200gb", f"{H100}/{H100X8}"
    parse_one(one)  # as they are, they parse
    parse_one(eight)
    with pytest.raises(ValueError, match="fabrics for a 1-GPU preset"):
        parse_one(one, fabrics={"eu-north1": ["fabric-2"]})
    with pytest.raises(ValueError, match="fabrics in 'eu-west1', where it is not priced"):
        parse_one(eight, fabrics={"eu-west1": ["fabric-5"]})
    with pytest.raises(ValueError, match="names 1 GPUs, 16 vCPUs and 200 GiB"):
        parse_one(one, vcpus=32)
    with pytest.raises(ValueError, match="has H100 GPUs, not H200:1"):
        parse_one(one, accelerator="H200:1")


def test_choose_ranks_by_price_carries_the_fabric_and_says_what_does_not_fit() -> None:
    found = choose([Accelerator("H100", 8), Accelerator("H200", 8)], "eu-north1")
    assert [(c.instance_type, c.fabric) for c in found] == [
        (f"{H100}/{H100X8}", "fabric-2"),
        (f"gpu-h200-sxm/{H100X8}", "fabric-7"),
    ]
    assert (found[0].platform, found[0].preset, found[0].hourly) == (H100, H100X8, 23.6)
    spot = choose([Accelerator("H200", 1)], "us-central1", spot=True)[0]
    assert spot.hourly == 1.45 and spot.fabric is None and spot.image_family == "ubuntu22.04-cuda12"
    cpu = choose(None, "us-central1", cpus=8, memory_gb=32)[0]
    assert cpu.instance_type == "cpu-d3/8vcpu-32gb" and cpu.image_family == "ubuntu22.04-driverless"
    offered = choose(
        [Accelerator("H100", 8), Accelerator("H200", 8)],
        "eu-north1",
        offered={f"gpu-h200-sxm/{H100X8}"},
    )
    assert [c.instance_type for c in offered] == [f"gpu-h200-sxm/{H100X8}"]
    with pytest.raises(
        ValueError, match=r"no Nebius preset for accelerators H100:8 is sold in us-central1"
    ):
        choose([Accelerator("H100", 8)], "us-central1")
    with pytest.raises(ValueError, match="not in rlinfra's Nebius catalog"):
        choose([Accelerator("H100", 8)], "mars-north1")
