"""A loopback gRPC server standing in for Nebius's API (no emulator exists): it serves the real
services' method names with the SDK's own message types (``nebius.api.nebius.*``): iam.v2
ProjectService/Get, compute.v1 PlatformService/List, quotas.v1 QuotaAllowanceService/GetByName,
vpc.v1 SubnetService/Get, and iam.v1 TokenExchangeService/Exchange for service account
credentials. Used by the nebius cloud's preflight and CLI tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import jwt
from nebius.api.nebius.common.v1 import ResourceMetadata
from nebius.api.nebius.compute import v1 as compute
from nebius.api.nebius.iam import v1 as iam_v1
from nebius.api.nebius.iam import v2 as iam
from nebius.api.nebius.quotas import v1 as quotas
from nebius.api.nebius.vpc import v1 as vpc

PROJECT = "project-e00rltest000001"
TENANT = "tenant-e00rltest000001"
OTHER_PROJECT = "project-e00other0000002"
SUBNET = "vpcsubnet-e00rltest00001"
TOKEN = "v1.rlinfra-loopback-test-token"
SA_TOKEN = "v1.rlinfra-exchanged-service-account-token"
SERVICE_ACCOUNT = "serviceaccount-e00rltest0001"
KEY_ID = "publickey-e00rltest0001"
H100 = "gpu-h100-sxm"
H100X8 = "8gpu-128vcpu-1600gb"
QUOTA_H100 = "compute.instance.gpu.h100"


# --- a loopback server standing in for Nebius's API ---------------------------------------------


@dataclass
class PlatformOffer:
    presets: dict[str, tuple[int, int, int]]  # name -> (vCPUs, GiB, GPUs)
    quota_type: str
    preemptible: bool = True


@dataclass
class LoopbackState:
    """What the stand-in's project has; set per test."""

    projects: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {PROJECT: ("eu-north1", TENANT)}
    )
    platforms: dict[str, PlatformOffer] = field(
        default_factory=lambda: {
            H100: PlatformOffer(
                {"1gpu-16vcpu-200gb": (16, 200, 1), H100X8: (128, 1600, 8)}, QUOTA_H100
            ),
            "cpu-d3": PlatformOffer({"4vcpu-16gb": (4, 16, 0)}, ""),
        }
    )
    # (container, quota name, region) -> (limit, usage, state)
    quotas: dict[tuple[str, str, str], tuple[int, int, str]] = field(
        default_factory=lambda: {(PROJECT, QUOTA_H100, "eu-north1"): (32, 0, "STATE_ACTIVE")}
    )
    subnets: dict[str, str] = field(default_factory=lambda: {SUBNET: PROJECT})
    tokens: set[str] = field(default_factory=lambda: {TOKEN})
    public_key: Any = None  # the service account's, for TokenExchangeService/Exchange
    page_size: int = 1  # platforms per page of PlatformService/List (pages are followed)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, authorization)


def _unary(handler: Callable[[Any, grpc.ServicerContext], Any], request_type: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        handler,
        request_deserializer=request_type.FromString,
        response_serializer=lambda message: message.SerializeToString(),
    )


class LoopbackNebiusApi:
    """A gRPC server on 127.0.0.1 that answers as Nebius's services do, in the SDK's message
    types, from ``state``; every call is recorded with its authorization header."""

    def __init__(self) -> None:
        self.state = LoopbackState()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "nebius.iam.v2.ProjectService",
                    {"Get": _unary(self.get_project, iam.GetProjectRequest)},
                ),
                grpc.method_handlers_generic_handler(
                    "nebius.compute.v1.PlatformService",
                    {"List": _unary(self.list_platforms, compute.ListPlatformsRequest)},
                ),
                grpc.method_handlers_generic_handler(
                    "nebius.quotas.v1.QuotaAllowanceService",
                    {"GetByName": _unary(self.get_quota, quotas.GetByNameRequest)},
                ),
                grpc.method_handlers_generic_handler(
                    "nebius.vpc.v1.SubnetService",
                    {"Get": _unary(self.get_subnet, vpc.GetSubnetRequest)},
                ),
                grpc.method_handlers_generic_handler(
                    "nebius.iam.v1.TokenExchangeService",
                    {"Exchange": _unary(self.exchange, iam_v1.ExchangeTokenRequest)},
                ),
            )
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None).wait(10)

    def methods(self) -> list[str]:
        return [method for method, _ in self.state.calls]

    def authorized(self, context: grpc.ServicerContext, method: str) -> None:
        metadata = dict(context.invocation_metadata())
        auth = str(metadata.get("authorization", ""))
        with self.lock:
            self.state.calls.append((method, auth))
        if auth.removeprefix("Bearer ") not in self.state.tokens:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid or expired token")

    def get_project(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.authorized(context, "iam.v2.ProjectService/Get")
        if request.id not in self.state.projects:
            context.abort(grpc.StatusCode.NOT_FOUND, f"resource {request.id} not found")
        region, tenant = self.state.projects[request.id]
        return iam.Project(
            metadata=ResourceMetadata(id=request.id, parent_id=tenant, name="rl"),
            spec=iam.ProjectSpec(region=region),
        )

    def list_platforms(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.authorized(context, "compute.v1.PlatformService/List")
        if request.parent_id not in self.state.projects:
            context.abort(grpc.StatusCode.NOT_FOUND, f"resource {request.parent_id} not found")
        names = sorted(self.state.platforms)
        start = int(request.page_token or 0)
        page = names[start : start + self.state.page_size]
        following = start + len(page)
        items = []
        for name in page:
            offer = self.state.platforms[name]
            items.append(
                compute.Platform(
                    metadata=ResourceMetadata(id=f"computeplatform-{name}", name=name),
                    spec=compute.PlatformSpec(
                        presets=[
                            compute.Preset(
                                name=preset,
                                resources=compute.PresetResources(
                                    vcpu_count=vcpus, memory_gibibytes=memory, gpu_count=gpus
                                ),
                                allow_gpu_clustering=gpus == 8,
                            )
                            for preset, (vcpus, memory, gpus) in offer.presets.items()
                        ],
                        gpu_count_quota_type=offer.quota_type,
                    ),
                    status=compute.PlatformStatus(allowed_for_preemptibles=offer.preemptible),
                )
            )
        return compute.ListPlatformsResponse(
            items=items, next_page_token=str(following) if following < len(names) else ""
        )

    def get_quota(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.authorized(context, "quotas.v1.QuotaAllowanceService/GetByName")
        key = (request.parent_id, request.name, request.region)
        if key not in self.state.quotas:
            context.abort(grpc.StatusCode.NOT_FOUND, f"quota {request.name} not found")
        limit, usage, state = self.state.quotas[key]
        return quotas.QuotaAllowance(
            metadata=ResourceMetadata(
                id="quotaallowance-1", parent_id=request.parent_id, name=request.name
            ),
            spec=quotas.QuotaAllowanceSpec(limit=limit, region=request.region),
            status=quotas.QuotaAllowanceStatus(
                state=getattr(quotas.QuotaAllowanceStatus.State, state), usage=usage
            ),
        )

    def get_subnet(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.authorized(context, "vpc.v1.SubnetService/Get")
        if request.id not in self.state.subnets:
            context.abort(grpc.StatusCode.NOT_FOUND, f"resource {request.id} not found")
        return vpc.Subnet(
            metadata=ResourceMetadata(id=request.id, parent_id=self.state.subnets[request.id])
        )

    def exchange(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A service account's signed JWT for an access token, as IAM's token service does."""
        with self.lock:
            self.state.calls.append(("iam.v1.TokenExchangeService/Exchange", ""))
        try:
            claims = jwt.decode(
                request.subject_token,
                self.state.public_key,
                algorithms=["RS256"],
                audience="token-service.iam.new.nebiuscloud.net",
            )
            header = jwt.get_unverified_header(request.subject_token)
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"bad subject token: {exc}")
        if (claims["iss"], claims["sub"], header["kid"]) != (
            SERVICE_ACCOUNT,
            SERVICE_ACCOUNT,
            KEY_ID,
        ):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown service account key")
        self.state.tokens.add(SA_TOKEN)
        return iam_v1.CreateTokenResponse(
            access_token=SA_TOKEN,
            issued_token_type="urn:ietf:params:oauth:token-type:access_token",
            token_type="Bearer",
            expires_in=3600,
        )
