"""Read-only checks of a Google Cloud project before Terraform runs (google-auth + REST).

Each check either passes, returns warnings (where the API cannot tell, e.g. a quota metric the
region does not list), or raises ``UsageError`` with one line saying what to fix. Nothing is
created. The calls are plain REST through google-auth's ``AuthorizedSession`` (``requests``),
in the documented JSON shapes:

- Compute Engine API v1 ``regions.get``
  (``GET https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}``,
  https://cloud.google.com/compute/docs/reference/rest/v1/regions/get): the project and region
  exist and the API is enabled; its ``quotas`` list (``[{"metric", "limit", "usage"}]``) holds
  the region's GPU quotas. Metric names per GPU, on-demand and Spot (``PREEMPTIBLE_`` prefix), are
  those of "GPU quota" in https://cloud.google.com/compute/resource-usage (``NVIDIA_H100_GPUS``,
  ``PREEMPTIBLE_NVIDIA_H100_GPUS``, ``NVIDIA_H100_MEGA_GPUS`` for A3 Mega, ...). Only GPU quotas
  are checked (vCPU quotas of the accelerator-optimized series are not).
- ``machineTypes.get``
  (``.../zones/{zone}/machineTypes/{machineType}``,
  https://cloud.google.com/compute/docs/reference/rest/v1/machineTypes/get): 404 means the zone
  does not offer the type; ``acceleratorTypes.get`` the same for the GPUs an N1 type attaches.
- Cloud Storage JSON API ``buckets.get`` (``GET https://storage.googleapis.com/storage/v1/b/
  {bucket}``): 404 means the name is free; 403 that another project owns it.

``RLINFRA_GCP_API_ENDPOINT`` (e.g. ``http://127.0.0.1:8089``) replaces the scheme and host of
every Google API called here (paths unchanged), so tests point them at a local server;
``STORAGE_EMULATOR_HOST`` (Google's own convention) does the same for Cloud Storage alone and
wins over it. Neither is ever written into a rendered file.

google-auth and requests are imported inside the functions so that importing this module costs
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlinfra.accelerators import Accelerator
from rlinfra.errors import UsageError

API_ENDPOINT_ENV = "RLINFRA_GCP_API_ENDPOINT"
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
COMPUTE_API = "https://compute.googleapis.com"
STORAGE_API = "https://storage.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# (connect, read) seconds: a preflight must answer quickly.
TIMEOUT = (5, 30)

CREDENTIALS_HINT = (
    "Run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service account key file, then retry."
)
API_HINT = (
    "Enable the Compute Engine API (`gcloud services enable compute.googleapis.com`) and give "
    "the credentials' account compute.regions.get and compute.machineTypes.get (e.g. "
    "roles/compute.viewer)."
)

# Quota metric of each GPU, on-demand; Spot uses "PREEMPTIBLE_" + the same name.
GPU_QUOTA_METRICS: dict[str, str] = {
    "H200": "NVIDIA_H200_GPUS",
    "H100": "NVIDIA_H100_GPUS",
    "A100-80GB": "NVIDIA_A100_80GB_GPUS",
    "A100": "NVIDIA_A100_GPUS",
    "L4": "NVIDIA_L4_GPUS",
    "T4": "NVIDIA_T4_GPUS",
    "V100": "NVIDIA_V100_GPUS",
}
# Machine types whose GPUs count against a quota of their own.
MACHINE_QUOTA_METRICS: dict[str, str] = {"a3-megagpu": "NVIDIA_H100_MEGA_GPUS"}

_IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_GCE_PRODUCT = Path("/sys/class/dmi/id/product_name")


@dataclass(frozen=True)
class GcpTarget:
    """What the deployment will ask Google Cloud for."""

    project: str
    region: str
    zone: str
    machine_type: str
    node_count: int
    accelerator: Accelerator | None = None
    # GPUs an N1 machine type attaches (acceleratorTypes name, e.g. "nvidia-tesla-t4").
    guest_accelerator: str | None = None
    spot: bool = False
    bucket: str | None = None


@dataclass(frozen=True)
class PreflightReport:
    project: str
    gpu_quota: tuple[str, float | None, float | None] | None  # (metric, limit, usage)
    warnings: tuple[str, ...] = field(default_factory=tuple)


# --- credentials ----------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def adc_file(environ: Mapping[str, str]) -> Path:
    """Where `gcloud auth application-default login` writes the credentials."""
    config = environ.get("CLOUDSDK_CONFIG")
    if config:
        return Path(config) / "application_default_credentials.json"
    home = Path(environ.get("HOME") or Path.home())
    return home / ".config" / "gcloud" / "application_default_credentials.json"


def on_compute_engine() -> bool:
    """Whether this machine is a Compute Engine VM (its DMI product name; no network call)."""
    try:
        return _GCE_PRODUCT.read_text().strip().startswith("Google")
    except OSError:
        return False


def credentials_configured(environ: Mapping[str, str]) -> bool:
    """Whether Application Default Credentials are set up, judged without any network call:
    GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file, or a Compute Engine VM (its metadata
    server holds the attached service account's credentials)."""
    if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    return adc_file(environ).is_file() or on_compute_engine()


def load_credentials(environ: Mapping[str, str]) -> tuple[Any, str | None]:
    """Application Default Credentials and their project (None when they name none).

    UsageError (exit 2) when none are configured or they cannot be loaded; nothing is asked of
    the network while none are configured.
    """
    if not credentials_configured(environ):
        raise UsageError(
            "no Google Cloud credentials found (Application Default Credentials)", CREDENTIALS_HINT
        )
    import google.auth
    from google.auth.exceptions import GoogleAuthError

    try:
        credentials, project = google.auth.default(scopes=list(SCOPES))
    except (GoogleAuthError, OSError, ValueError) as exc:
        raise UsageError(
            f"Google Cloud credentials could not be loaded: {_one_line(exc)}", CREDENTIALS_HINT
        ) from None
    return credentials, project or None


def authorized_session(credentials: Any) -> Any:
    from google.auth.transport.requests import AuthorizedSession

    return AuthorizedSession(credentials)  # type: ignore[no-untyped-call]


# --- endpoints and calls ----------------------------------------------------------------------------


def api_base(default: str, environ: Mapping[str, str]) -> str:
    """``default`` (a Google API's scheme and host), or RLINFRA_GCP_API_ENDPOINT's."""
    override = (environ.get(API_ENDPOINT_ENV) or "").strip().rstrip("/")
    return override or default


def storage_base(environ: Mapping[str, str]) -> str:
    """The Cloud Storage JSON API's scheme and host: STORAGE_EMULATOR_HOST (an emulator),
    RLINFRA_GCP_API_ENDPOINT, or Google's."""
    emulator = (environ.get(STORAGE_EMULATOR_ENV) or "").strip().rstrip("/")
    if emulator:
        return emulator if "://" in emulator else f"http://{emulator}"
    return api_base(STORAGE_API, environ)


def error_message(response: Any) -> str:
    """The message of a Google API error answer (``{"error": {"message": ...}}``), else its text."""
    try:
        body = response.json()
        message = body["error"]["message"] if isinstance(body.get("error"), dict) else None
    except (ValueError, KeyError, TypeError, AttributeError):
        message = None
    text = message or getattr(response, "text", "") or ""
    return " ".join(str(text).split())[:300] or f"HTTP {response.status_code}"


def call(session: Any, method: str, url: str, what: str, **kwargs: Any) -> Any:
    """One request; UsageError when the credentials are refused or nothing answers."""
    import requests
    from google.auth.exceptions import GoogleAuthError

    try:
        response = session.request(method, url, timeout=TIMEOUT, **kwargs)
    except GoogleAuthError as exc:
        raise UsageError(
            f"Google did not accept the credentials ({what}): {_one_line(exc)}", CREDENTIALS_HINT
        ) from None
    except requests.RequestException as exc:
        raise UsageError(
            f"cannot {what}: Google Cloud did not answer ({_one_line(exc)})",
            f"Check the network (proxy, VPN) or {API_ENDPOINT_ENV}, then retry.",
        ) from None
    if response.status_code == 401:
        raise UsageError(
            f"Google did not accept the credentials ({what}): {error_message(response)}",
            CREDENTIALS_HINT,
        )
    return response


def _json(response: Any, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise UsageError(f"cannot {what}: the answer is not JSON") from None
    if not isinstance(body, dict):
        raise UsageError(f"cannot {what}: unexpected answer")
    return body


# --- checks -------------------------------------------------------------------------------------------


def gcs_bucket_name_problem(name: str) -> str | None:
    """What Cloud Storage refuses in a bucket name that rlinfra's profile rules allow, or None."""
    if name.startswith("goog"):
        return "it must not start with 'goog'"
    if re.search(r"g[o0][o0]gle", name):
        return "it must not contain 'google' (or a look-alike)"
    if _IPV4_RE.match(name):
        return "it must not look like an IP address"
    return None


def gpu_quota_metric(machine_type: str, accelerator: Accelerator | None, spot: bool) -> str | None:
    """The regional quota metric that limits this machine type's GPUs (None without GPUs, or for
    a GPU rlinfra has no metric for)."""
    if accelerator is None:
        return None
    metric = next(
        (m for prefix, m in MACHINE_QUOTA_METRICS.items() if machine_type.startswith(prefix)),
        GPU_QUOTA_METRICS.get(accelerator.name),
    )
    if metric is None:
        return None
    return f"PREEMPTIBLE_{metric}" if spot else metric


def check_region(session: Any, base: str, project: str, region: str) -> dict[str, Any]:
    """regions.get: the project and region exist, and the Compute API answers; the region's
    resource (with its quotas) is returned."""
    what = f"read region {region} of project {project}"
    url = f"{base}/compute/v1/projects/{quote(project)}/regions/{quote(region)}"
    response = call(session, "GET", url, what)
    if response.status_code == 404:
        message = error_message(response)
        if f"regions/{region}" in message:
            raise UsageError(
                f"region {region!r} does not exist in Compute Engine",
                "Use a region such as 'us-central1' in the profile's region.",
            )
        raise UsageError(
            f"project {project!r} was not found, or the credentials may not see it ({message})",
            "Check the profile's project (`gcloud projects list` shows the ones you can use).",
        )
    if response.status_code == 403:
        raise UsageError(f"Compute Engine refused to {what}: {error_message(response)}", API_HINT)
    if response.status_code != 200:
        raise UsageError(f"cannot {what}: {error_message(response)}")
    return _json(response, what)


def check_machine_type(
    session: Any,
    base: str,
    project: str,
    zone: str,
    machine_type: str,
    others: tuple[str, ...] = (),
) -> dict[str, Any]:
    """machineTypes.get in the zone: UsageError (naming the zone) when the zone lacks the type.
    ``others``: zones that offer it according to rlinfra's catalog, for the hint."""
    what = f"look up machine type {machine_type} in zone {zone}"
    url = (
        f"{base}/compute/v1/projects/{quote(project)}/zones/{quote(zone)}"
        f"/machineTypes/{quote(machine_type)}"
    )
    response = call(session, "GET", url, what)
    if response.status_code == 404:
        hint = (
            f"Zones that offer it by rlinfra's catalog: {', '.join(others)}; set the profile's "
            "zone to one of them, or choose other accelerators."
            if others
            else "Set the profile's zone to one that offers it, or choose other accelerators."
        )
        raise UsageError(f"zone {zone} does not offer machine type {machine_type}", hint)
    if response.status_code == 403:
        raise UsageError(f"Compute Engine refused to {what}: {error_message(response)}", API_HINT)
    if response.status_code != 200:
        raise UsageError(f"cannot {what}: {error_message(response)}")
    return _json(response, what)


def check_accelerator_type(
    session: Any, base: str, project: str, zone: str, accelerator_type: str
) -> None:
    """acceleratorTypes.get in the zone, for GPUs attached to an N1 machine type."""
    what = f"look up GPU type {accelerator_type} in zone {zone}"
    url = (
        f"{base}/compute/v1/projects/{quote(project)}/zones/{quote(zone)}"
        f"/acceleratorTypes/{quote(accelerator_type)}"
    )
    response = call(session, "GET", url, what)
    if response.status_code == 404:
        raise UsageError(
            f"zone {zone} does not offer GPU type {accelerator_type}",
            "Set the profile's zone to one that offers it, or choose other accelerators.",
        )
    if response.status_code != 200:
        raise UsageError(f"cannot {what}: {error_message(response)}")


def check_gpu_quota(
    region_resource: Mapping[str, Any],
    metric: str,
    needed: int,
    region: str,
    what: str,
) -> tuple[tuple[str, float | None, float | None], str | None]:
    """The region's quota ``metric`` against ``needed`` GPUs: UsageError when its limit is
    lower; a warning (returned) when the region does not list the metric, or when GPUs already
    in use leave less than needed (they may be this cluster's own, on a re-run)."""
    quotas = {
        str(q.get("metric")): q for q in region_resource.get("quotas") or [] if isinstance(q, dict)
    }
    entry = quotas.get(metric)
    if entry is None:
        return (metric, None, None), (
            f"region {region} lists no quota {metric}; the project may have none: make sure it "
            f"allows {needed} GPUs ({what}) before the nodes are created"
        )
    try:
        limit = float(entry.get("limit", 0))
        usage = float(entry.get("usage", 0))
    except (TypeError, ValueError):
        return (metric, None, None), f"quota {metric} in {region} is not readable: {entry!r}"
    if limit < needed:
        raise UsageError(
            f"GPU quota {metric} in {region} is {limit:g}, but {what} need {needed} GPUs",
            f"Request an increase to at least {needed} (IAM & Admin > Quotas, metric {metric}, "
            f"region {region}); GPUs already in use count against it too.",
        )
    warning = None
    if limit - usage < needed:
        warning = (
            f"GPU quota {metric} in {region}: {usage:g} of {limit:g} in use, {needed} needed by "
            f"{what}; creation fails unless those in use are this cluster's own"
        )
    return (metric, limit, usage), warning


def check_bucket(session: Any, base: str, bucket: str, region: str) -> list[str]:
    """buckets.get: a free name, or an existing bucket the credentials may read (reused)."""
    what = f"check bucket {bucket}"
    response = call(session, "GET", f"{base}/storage/v1/b/{quote(bucket, safe='')}", what)
    if response.status_code == 404:
        return []
    if response.status_code == 403:
        raise UsageError(
            f"bucket {bucket!r} already exists and belongs to another project (or this one may "
            "not read it)",
            "Bucket names are global: choose another name in the profile's storage section.",
        )
    if response.status_code != 200:
        raise UsageError(f"cannot {what}: {error_message(response)}")
    location = str(_json(response, what).get("location") or "")
    if location and location.lower() != region.lower():
        return [f"bucket {bucket!r} is in {location}, not in {region}: traffic leaves the region"]
    return []


# --- all of it --------------------------------------------------------------------------------------


def preflight(
    target: GcpTarget,
    environ: Mapping[str, str],
    *,
    session: Any = None,
    catalog_zones: tuple[str, ...] = (),
) -> PreflightReport:
    """Every check in order: names (no call), credentials, region (project, API, quotas), the
    zone's machine type (and N1 GPUs), the GPU quota, the bucket. Raises UsageError on the
    first failure. ``session``: an authorized ``requests`` session (tests); by default one is
    made from Application Default Credentials. ``catalog_zones``: the catalog's zones of the
    region that offer the type (for the hint when the zone does not)."""
    if target.node_count < 1:
        raise UsageError(f"node_count must be at least 1, not {target.node_count}")
    if not target.zone.startswith(target.region + "-"):
        raise UsageError(
            f"zone {target.zone!r} is not in region {target.region}",
            f"Use a zone of {target.region}, such as '{target.region}-a'.",
        )
    if target.bucket:
        problem = gcs_bucket_name_problem(target.bucket)
        if problem:
            raise UsageError(f"bucket name {target.bucket!r} is not valid on GCS: {problem}")
    if session is None:
        credentials, _ = load_credentials(environ)
        session = authorized_session(credentials)
    compute = api_base(COMPUTE_API, environ)
    region = check_region(session, compute, target.project, target.region)
    others = tuple(z for z in catalog_zones if z != target.zone)
    check_machine_type(session, compute, target.project, target.zone, target.machine_type, others)
    if target.guest_accelerator:
        check_accelerator_type(
            session, compute, target.project, target.zone, target.guest_accelerator
        )
    warnings: list[str] = []
    quota = None
    metric = gpu_quota_metric(target.machine_type, target.accelerator, target.spot)
    if metric is not None and target.accelerator is not None:
        needed = target.node_count * target.accelerator.count
        what = f"{target.node_count} x {target.machine_type}" + (" (Spot)" if target.spot else "")
        quota, warning = check_gpu_quota(region, metric, needed, target.region, what)
        if warning:
            warnings.append(warning)
    if target.bucket:
        warnings += check_bucket(session, storage_base(environ), target.bucket, target.region)
    return PreflightReport(target.project, quota, tuple(warnings))
