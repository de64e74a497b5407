"""Read-only checks of a Nebius AI Cloud project before Terraform runs (the ``nebius`` SDK, gRPC).

Each check passes, returns a warning (where the answer cannot be judged, e.g. GPUs in use that
may be this cluster's own), or raises ``UsageError`` with one line saying what is wrong and what
to do. Nothing is created. In order, through the official SDK's generated clients:

- credentials, found without any call (``find_credentials``, below);
- ``nebius.iam.v2.ProjectService/Get`` (id = the project): the project exists, the credentials
  see it, and it is in the region asked for (a Nebius project belongs to one region,
  ``spec.region``);
- ``nebius.compute.v1.PlatformService/List`` (parent_id = the project, every page): the
  platform is offered in the project's region, with the preset; for preemptible nodes, that
  the platform allows them (``status.allowed_for_preemptibles``);
- ``nebius.quotas.v1.QuotaAllowanceService/GetByName`` (the platform's
  ``spec.gpu_count_quota_type``, e.g. ``compute.instance.gpu.h100``, in the region): the GPU
  quota of the project, else of its tenant, holds node count x GPUs per node. Whether
  preemptible GPUs count against an allowance of their own is not known here: the same one is
  checked;
- ``nebius.vpc.v1.SubnetService/Get`` (an existing subnet, when one is named): it exists and
  belongs to the project.

Credentials, the first found of (the environment's token first, as the SDK's CLI config reader
has it): ``NEBIUS_IAM_TOKEN`` (an IAM token, e.g. from ``nebius iam get-access-token``); a
service account credentials file named by ``RLINFRA_NEBIUS_CREDENTIALS_FILE`` (the JSON that
``nebius iam auth-public-key generate`` writes); the Nebius CLI's profile in
``~/.nebius/config.yaml`` (``NEBIUS_PROFILE`` picks one, else the file's ``default``, else its
only profile); ``~/.nebius/credentials.json`` (where SkyPilot's setup writes that JSON).
A CLI profile that signs in through a browser (federation) is refused: a preflight cannot wait
for one. The credentials stay in this process: the SDK gets the token's value or the file's
path, nothing is written anywhere and nothing goes on a command line.

``RLINFRA_NEBIUS_API_ENDPOINT`` (``host:port``) sends every service's calls to that address
instead of the addresses the SDK resolves (``<service>.api.nebius.cloud:443``), so tests point
them at a local server; plaintext only to a loopback address, TLS otherwise. It is never
written into a rendered file.

The SDK is imported inside the functions that call it, so that importing this module (and
``rlinfra --help``) costs nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from rlinfra import __version__
from rlinfra.errors import UsageError

TOKEN_ENV = "NEBIUS_IAM_TOKEN"  # the SDK's and the CLI's
PROFILE_ENV = "NEBIUS_PROFILE"  # the SDK's and the CLI's
ENDPOINT_ENV = "NEBIUS_ENDPOINT"  # the SDK's: overrides a CLI profile's endpoint
CREDENTIALS_FILE_ENV = "RLINFRA_NEBIUS_CREDENTIALS_FILE"
API_ENDPOINT_ENV = "RLINFRA_NEBIUS_API_ENDPOINT"
CONFIG_DIR = ".nebius"  # under HOME, as the CLI and the SDK have it
CONFIG_FILE = "config.yaml"
CREDENTIALS_FILE = "credentials.json"
USER_AGENT = f"rlinfra/{__version__}"
# Seconds one call (its retries included) and the credentials' token exchange may take.
TIMEOUT = 30.0
PAGE_SIZE = 999

CREDENTIALS_HINT = (
    f"Set {TOKEN_ENV} (e.g. from `nebius iam get-access-token`), set {CREDENTIALS_FILE_ENV} to "
    "a service account credentials file (`nebius iam auth-public-key generate --output FILE`), "
    "or create a Nebius CLI profile (`nebius profile create`), then retry."
)


# --- credentials ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """Where the credentials are, never what they are: ``token`` (an environment variable holding
    an IAM token), ``file`` (a service account credentials file) or ``profile`` (a profile of the
    Nebius CLI's config file)."""

    kind: Literal["token", "file", "profile"]
    where: str  # how messages name them
    env: str | None = None  # token: the variable
    path: Path | None = None  # file: the credentials file; profile: the CLI's config file
    profile: str | None = None  # profile: its name


def nebius_dir(environ: Mapping[str, str]) -> Path:
    """``~/.nebius`` of the environment's HOME."""
    return Path(environ.get("HOME") or Path.home()) / CONFIG_DIR


def _one_line(text: object, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    if "-----BEGIN" in flat:  # never echo key material a parser quoted
        flat = flat.split("-----BEGIN", 1)[0] + "[key material left out]"
    return flat[:limit]


def _cli_profile(config: Path, environ: Mapping[str, str]) -> Credentials | None:
    """The CLI profile the SDK would use from ``config`` (None: no profile there), refused when
    it cannot serve a preflight."""
    try:
        data = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(
            f"the Nebius CLI config {config} cannot be read ({type(exc).__name__})",
            CREDENTIALS_HINT,
        ) from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict) or not profiles:
        return None
    name = environ.get(PROFILE_ENV) or data.get("default")
    if not name and len(profiles) == 1:
        name = next(iter(profiles))
    if not name:
        raise UsageError(
            f"the Nebius CLI config {config} has several profiles and no default",
            f"Set {PROFILE_ENV} to one of: {', '.join(sorted(map(str, profiles)))}.",
        )
    profile = profiles.get(name)
    if not isinstance(profile, dict):
        raise UsageError(
            f"Nebius CLI profile {name!r} is not in {config}",
            f"Set {PROFILE_ENV} to one of: {', '.join(sorted(map(str, profiles)))}.",
        )
    signs_in_elsewhere = profile.get("token-file") or profile.get("token-endpoint")
    if profile.get("auth-type") == "federation" and not signs_in_elsewhere:
        raise UsageError(
            f"Nebius CLI profile {name!r} signs in through a browser (federation), which a "
            "preflight cannot wait for",
            f"Export {TOKEN_ENV}=$(nebius iam get-access-token), or use a service account "
            "profile or credentials file, then retry.",
        )
    return Credentials(
        "profile", f"Nebius CLI profile {name!r} ({config})", path=config, profile=name
    )


def find_credentials(environ: Mapping[str, str]) -> Credentials:
    """The credentials the preflight will use, found without any call and without reading any
    secret (only the CLI config's profile names and kinds); UsageError (exit 2) when there are
    none, or the ones named cannot serve."""
    if environ.get(TOKEN_ENV, "").strip():
        return Credentials("token", TOKEN_ENV, env=TOKEN_ENV)
    named = environ.get(CREDENTIALS_FILE_ENV, "").strip()
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise UsageError(
                f"{CREDENTIALS_FILE_ENV} names {path}, which is not a file", CREDENTIALS_HINT
            )
        return Credentials("file", f"the credentials file {path}", path=path)
    folder = nebius_dir(environ)
    config = folder / CONFIG_FILE
    if config.is_file():
        found = _cli_profile(config, environ)
        if found is not None:
            return found
    default_file = folder / CREDENTIALS_FILE
    if default_file.is_file():
        return Credentials("file", f"the credentials file {default_file}", path=default_file)
    raise UsageError(
        f"no Nebius credentials found ({TOKEN_ENV}, {CREDENTIALS_FILE_ENV}, a CLI profile in "
        f"{config}, or {default_file})",
        CREDENTIALS_HINT,
    )


# --- the endpoint and the SDK ---------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where the calls go: ``address`` (``host:port``) for every service, None for the addresses
    the SDK resolves; ``plaintext``: no TLS (a loopback server only)."""

    address: str | None = None
    plaintext: bool = False


_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(?P<port>\d{1,5})$")


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_from(environ: Mapping[str, str]) -> Endpoint:
    """RLINFRA_NEBIUS_API_ENDPOINT's address (plaintext when it is a loopback one), else the
    SDK's own addresses."""
    value = environ.get(API_ENDPOINT_ENV, "").strip()
    if not value:
        return Endpoint()
    found = _HOST_PORT.match(value)
    if found is None:
        raise UsageError(
            f"{API_ENDPOINT_ENV}={value!r} is not host:port",
            "Give an address such as 127.0.0.1:50051, or unset it to use Nebius's API.",
        )
    return Endpoint(value, plaintext=is_loopback(found["host"]))


def connect(credentials: Credentials, environ: Mapping[str, str], endpoint: Endpoint) -> Any:
    """The SDK (``nebius.sdk.SDK``), on ``endpoint`` with ``credentials``; UsageError when the
    credentials cannot be loaded. The caller closes it (``sync_close``)."""
    from nebius.base.error import SDKError
    from nebius.base.options import INSECURE
    from nebius.base.resolver import Constant
    from nebius.sdk import SDK

    # The SDK logs each failed token fetch with its traceback; the failure reaches the user as
    # the call's one-line error, so without a logging setup of the program's own nothing is shown.
    sdk_log = logging.getLogger("nebius")
    if not any(isinstance(h, logging.NullHandler) for h in sdk_log.handlers):
        sdk_log.addHandler(logging.NullHandler())
    kwargs: dict[str, Any] = {"user_agent_prefix": USER_AGENT}
    if endpoint.address:
        kwargs["resolver"] = Constant(endpoint.address)
        kwargs["domain"] = endpoint.address
    if endpoint.plaintext:
        kwargs["options"] = [(INSECURE, True)]
    try:
        if credentials.kind == "token":
            assert credentials.env is not None
            kwargs["credentials"] = environ[credentials.env].strip()
        elif credentials.kind == "file":
            kwargs["credentials_file_name"] = credentials.path
        else:
            from nebius.aio.cli_config import Config

            assert credentials.path is not None
            kwargs["config_reader"] = Config(
                config_file=credentials.path,
                profile=credentials.profile,
                endpoint=environ.get(ENDPOINT_ENV) or None,
                no_env=True,  # the environment was read above, from ``environ``
                no_parent_id=True,  # every request names its parent
            )
        return SDK(**kwargs)
    except (SDKError, OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"the Nebius credentials ({credentials.where}) cannot be loaded: "
            f"{type(exc).__name__}: {_one_line(exc)}",
            CREDENTIALS_HINT,
        ) from None


# --- the calls ----------------------------------------------------------------------------------


class Api:
    """The calls the checks make, through the SDK's generated clients, with Nebius's answers
    that are not the check's to judge turned into one-line UsageErrors: credentials refused
    (UNAUTHENTICATED), no answer (UNAVAILABLE, DEADLINE_EXCEEDED)."""

    def __init__(self, sdk: Any, credentials: Credentials, timeout: float = TIMEOUT) -> None:
        self.sdk = sdk
        self.credentials = credentials
        self.timeout = timeout

    def call(self, request: Any, what: str, expected: tuple[str, ...] = ()) -> tuple[Any, str]:
        """(the answer, "OK"), or (None, the status code's name) for a code in ``expected``."""
        from nebius.aio.service_error import RequestError
        from nebius.base.error import SDKError

        try:
            return request.wait(), "OK"
        except RequestError as exc:
            code = exc.status.code.name
            message = _one_line(exc.status.message or "")
            if code in expected:
                return None, code
            if code == "UNAUTHENTICATED":
                raise UsageError(
                    f"Nebius did not accept the credentials ({self.credentials.where}) to {what}: "
                    f"{message or code}",
                    CREDENTIALS_HINT,
                ) from None
            if code == "PERMISSION_DENIED":
                raise UsageError(
                    f"Nebius refused to {what} for {self.credentials.where}: {message or code}",
                    "Give the account a role in the project that may read it (e.g. membership "
                    "in its viewers or editors group), then retry.",
                ) from None
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise UsageError(
                    f"cannot {what}: Nebius's API did not answer ({code}: {message})",
                    f"Check the network (proxy, VPN) or {API_ENDPOINT_ENV}, then retry.",
                ) from None
            raise UsageError(f"cannot {what}: {code}: {message}") from None
        except SDKError as exc:
            raise UsageError(
                f"the Nebius credentials ({self.credentials.where}) could not be used to {what}: "
                f"{type(exc).__name__}: {_one_line(exc)}",
                CREDENTIALS_HINT,
            ) from None

    def kwargs(self) -> dict[str, Any]:
        """Each call's limits; a token the credentials must get first (a service account's
        exchange) is fetched before the call, and its failure is the call's error."""
        from nebius.aio.token.options import OPTION_RENEW_SYNCHRONOUS, OPTION_REPORT_ERROR

        auth = {OPTION_RENEW_SYNCHRONOUS: "1", OPTION_REPORT_ERROR: "1"}
        return {"timeout": self.timeout, "auth_timeout": self.timeout, "auth_options": auth}

    def project(self, project_id: str) -> tuple[Any, str]:
        from nebius.api.nebius.iam.v2 import GetProjectRequest, ProjectServiceClient

        request = ProjectServiceClient(self.sdk).get(
            GetProjectRequest(id=project_id), **self.kwargs()
        )
        return self.call(
            request,
            f"read project {project_id}",
            ("NOT_FOUND", "PERMISSION_DENIED", "INVALID_ARGUMENT"),
        )

    def platforms(self, project_id: str) -> Iterator[Any]:
        from nebius.api.nebius.compute.v1 import ListPlatformsRequest, PlatformServiceClient

        client = PlatformServiceClient(self.sdk)
        token = ""
        while True:
            request = client.list(
                ListPlatformsRequest(parent_id=project_id, page_size=PAGE_SIZE, page_token=token),
                **self.kwargs(),
            )
            page, _ = self.call(request, f"list the compute platforms of project {project_id}")
            yield from page.items
            token = page.next_page_token
            if not token:
                return

    def quota(self, container_id: str, name: str, region: str) -> tuple[Any, str]:
        from nebius.api.nebius.quotas.v1 import GetByNameRequest, QuotaAllowanceServiceClient

        request = QuotaAllowanceServiceClient(self.sdk).get_by_name(
            GetByNameRequest(parent_id=container_id, name=name, region=region), **self.kwargs()
        )
        return self.call(
            request, f"read quota {name} of {container_id} in {region}", ("NOT_FOUND",)
        )

    def subnet(self, subnet_id: str) -> tuple[Any, str]:
        from nebius.api.nebius.vpc.v1 import GetSubnetRequest, SubnetServiceClient

        request = SubnetServiceClient(self.sdk).get(GetSubnetRequest(id=subnet_id), **self.kwargs())
        return self.call(
            request,
            f"read subnet {subnet_id}",
            ("NOT_FOUND", "PERMISSION_DENIED", "INVALID_ARGUMENT"),
        )


# --- the checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quota:
    """A GPU quota as the check read it: the allowance's name, whose it is, its limit and usage,
    and the GPUs the deployment needs."""

    name: str
    container_id: str
    limit: int
    usage: int
    needed: int


@dataclass(frozen=True)
class Report:
    """What the checks found: the credentials used, the project's region, the
    ``<platform>/<preset>`` keys the region offers (the catalog's ``offered``), the GPU quota
    (None for a CPU preset) and the warnings to show."""

    project_id: str
    region: str
    credentials: str
    offered: frozenset[str]
    quota: Quota | None
    warnings: tuple[str, ...]


def check_project(api: Api, project_id: str, region: str) -> Any:
    """ProjectService.Get: the project exists, the credentials see it, and it is in ``region``."""
    project, code = api.project(project_id)
    if project is None:
        raise UsageError(
            f"Nebius project {project_id!r} was not found, or {api.credentials.where} may not "
            f"see it ({code})",
            "Check the profile's project: its ID (project-...) is in the web console's project "
            "list, or `nebius iam project list --parent-id TENANT_ID`.",
        )
    actual = str(project.spec.region or "")
    if actual and actual != region:
        raise UsageError(
            f"Nebius project {project_id} is in region {actual}, not {region}",
            f"A Nebius project belongs to one region: set the region to {actual}, or use a "
            f"project of {region}.",
        )
    return project


def check_platform(
    api: Api, project_id: str, region: str, platform: str, preset: str, spot: bool
) -> tuple[Any, Any, frozenset[str]]:
    """PlatformService.List: the platform and its preset are offered in the project's region (and
    allow preemptible VMs, for ``spot``); (the platform, the preset, every offered key)."""
    platforms = {str(p.metadata.name): p for p in api.platforms(project_id)}
    offered = frozenset(f"{name}/{s.name}" for name, p in platforms.items() for s in p.spec.presets)
    found = platforms.get(platform)
    if found is None:
        listed = ", ".join(sorted(platforms)) or "none"
        raise UsageError(
            f"platform {platform} is not offered in region {region} (project {project_id} "
            f"offers: {listed})",
            "Choose accelerators that a platform of this region has, or a project (and region) "
            "that offers the platform.",
        )
    presets = {str(s.name): s for s in found.spec.presets}
    if preset not in presets:
        raise UsageError(
            f"platform {platform} in region {region} has no preset {preset} (its presets: "
            f"{', '.join(sorted(presets)) or 'none'})",
            "Choose another size (resources.cpus / memory_gb / accelerators) or instance_type.",
        )
    if spot and not found.status.allowed_for_preemptibles:
        raise UsageError(
            f"platform {platform} does not allow preemptible VMs in region {region} (project "
            f"{project_id})",
            "Set resources.spot: false, or choose a platform that allows preemptible VMs.",
        )
    return found, presets[preset], offered


def gpu_quota_name(platform: Any) -> str:
    """The quota a platform's GPUs count against: its ``spec.gpu_count_quota_type``, else
    ``compute.instance.gpu.<model>`` from its name (``gpu-h100-sxm`` -> ``...gpu.h100``)."""
    named = str(platform.spec.gpu_count_quota_type or "")
    if named:
        return named
    model = str(platform.metadata.name).split("-")[1:2]
    return f"compute.instance.gpu.{model[0] if model else 'unknown'}"


def check_gpu_quota(
    api: Api,
    project: Any,
    region: str,
    platform: Any,
    gpus_per_node: int,
    node_count: int,
    what: str,
) -> tuple[Quota, str | None]:
    """QuotaAllowanceService.GetByName for the platform's GPU quota in ``region``, the project's
    allowance, else its tenant's: UsageError when the limit is below node_count x GPUs (or there
    is no allowance, or it is not active); a warning (returned) when GPUs in use leave fewer than
    needed (they may be this cluster's own, on a re-run)."""
    name = gpu_quota_name(platform)
    needed = gpus_per_node * node_count
    project_id = str(project.metadata.id)
    containers = [project_id]
    tenant = str(project.metadata.parent_id or "")
    if tenant and tenant != project_id:
        containers.append(tenant)
    allowance = None
    owner = project_id
    for container in containers:
        allowance, _ = api.quota(container, name, region)
        if allowance is not None:
            owner = container
            break
    hint = (
        f"Request at least {needed} (web console: Administration > Limits > Quotas, quota {name}, "
        f"region {region}); GPUs already in use count against it too."
    )
    if allowance is None:
        whose = f"project {project_id}" + (
            f" nor its tenant {tenant}" if len(containers) > 1 else ""
        )
        raise UsageError(
            f"GPU quota {name} in {region}: neither {whose} has an allowance, but {what} need "
            f"{needed} GPUs",
            hint,
        )
    state = allowance.status.state.name
    if state in ("STATE_FROZEN", "STATE_DELETED"):
        raise UsageError(
            f"GPU quota {name} of {owner} in {region} is {state.removeprefix('STATE_').lower()}, "
            f"so {what} cannot use it",
            hint,
        )
    limit = int(allowance.spec.limit or 0)
    usage = int(allowance.status.usage or 0)
    quota = Quota(name, owner, limit, usage, needed)
    if limit < needed:
        raise UsageError(
            f"GPU quota {name} of {owner} in {region} is {limit}, but {what} need {needed} GPUs",
            hint,
        )
    warning = None
    if limit - usage < needed:
        warning = (
            f"GPU quota {name} of {owner} in {region}: {usage} of {limit} in use, {needed} "
            f"needed by {what}; creation fails unless those in use are this cluster's own"
        )
    return quota, warning


def check_subnet(api: Api, subnet_id: str, project_id: str) -> None:
    """SubnetService.Get: the subnet exists and belongs to the project."""
    subnet, code = api.subnet(subnet_id)
    if subnet is None:
        raise UsageError(
            f"subnet {subnet_id!r} does not exist, or {api.credentials.where} may not see it "
            f"({code})",
            "Name an existing subnet of the project (`nebius vpc subnet list --parent-id "
            "PROJECT_ID`), or leave it out so that rlinfra makes one.",
        )
    owner = str(subnet.metadata.parent_id or "")
    if owner and owner != project_id:
        raise UsageError(
            f"subnet {subnet_id} belongs to project {owner}, not {project_id}",
            "Name a subnet of the deployment's project, or leave it out so that rlinfra makes one.",
        )


def check(
    project_id: str,
    region: str,
    platform: str,
    preset: str,
    node_count: int,
    subnet_id: str | None = None,
    spot: bool = False,
    *,
    environ: Mapping[str, str],
    credentials: Credentials | None = None,
    endpoint: Endpoint | None = None,
    timeout: float = TIMEOUT,
) -> Report:
    """Every check in order, reading only: arguments (no call), credentials (no call), the
    project and its region, the platform and preset, the GPU quota, the subnet. Raises
    UsageError on the first failure.

    ``environ``: where credentials and endpoint are read from (``os.environ`` in use);
    ``credentials``: found already (else ``find_credentials(environ)``); ``endpoint``: where the
    calls go (else ``endpoint_from(environ)``).
    """
    if node_count < 1:
        raise UsageError(f"node count must be at least 1, not {node_count}")
    for label, value in (("project", project_id), ("region", region), ("platform", platform)):
        if not value:
            raise UsageError(f"the Nebius {label} is empty")
    creds = credentials or find_credentials(environ)
    sdk = connect(creds, environ, endpoint or endpoint_from(environ))
    try:
        api = Api(sdk, creds, timeout)
        project = check_project(api, project_id, region)
        found, size, offered = check_platform(api, project_id, region, platform, preset, spot)
        what = f"{node_count} x {platform}/{preset}" + (" (preemptible)" if spot else "")
        warnings: list[str] = []
        quota = None
        gpus = int(size.resources.gpu_count or 0)
        if gpus:
            quota, warning = check_gpu_quota(api, project, region, found, gpus, node_count, what)
            if warning:
                warnings.append(warning)
        if subnet_id:
            check_subnet(api, subnet_id, project_id)
        return Report(project_id, region, creds.where, offered, quota, tuple(warnings))
    finally:
        sdk.sync_close(timeout=10)
