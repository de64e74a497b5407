"""The `ssh` cloud: machines the team already has (on-prem, reserved, another provider's VMs).

No Terraform compute: the hosts come from the profile's ``ssh:`` section. `up` checks every host
over SSH before changing anything (``clouds/ssh/preflight.py``), then runs the same Ansible
roles, Ray cluster, acceptance check and job as every cloud. `down` leaves the machines: it stops
rlinfra's processes and removes the node contract; `down --purge` removes all that rlinfra
installed. Buckets: local buckets (folders of this machine) when the hosts share its filesystem
(``ssh.shared_filesystem``), or S3 buckets (``ssh.buckets``): Terraform makes them with this
machine's AWS credentials (the aws cloud's storage root), and the hosts mount them with rclone
and a key of the user's that reaches them over SSH's standard input only
(``SshCloud.before_configure``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinfra import layout, ui
from rlinfra.clouds.base import Cloud, UpQuestion
from rlinfra.clouds.local import cloud as local
from rlinfra.clouds.ssh.preflight import Answer, Expect, check_hosts, probe_host
from rlinfra.clouds.ssh.section import SshHost, SshHosts, SshJump
from rlinfra.context import Context
from rlinfra.deploy import deployment_dir
from rlinfra.errors import OperationError, UsageError
from rlinfra.plan import BUCKET_ENV, Plan, Site
from rlinfra.profile import Override, Profile
from rlinfra.record import Host, Record
from rlinfra.storage.base import Store
from rlinfra.storage.s3 import (
    S3,
    S3_ROOT_DIR,
    S3_ROOT_MODULES,
    common_tfvars,
    credentials_configured,
    send_bucket_key,
)

ROOTS: dict[str, tuple[str, ...]] = {"storage": ("local_bucket",)}

RLINFRA_ROOT = layout.ROOT
# Files of the base role outside /opt/rlinfra (removed by --purge only if rlinfra wrote them).
SYSTEM_FILES = ("/etc/security/limits.d/90-rlinfra.conf", "/etc/sysctl.d/90-rlinfra.conf")
# The node contract and what belongs to one cluster's run (removed by every `down`).
CONTRACT = ("node.env", "node.json", "converged", "ray", "jobs", "run", "secrets")
# Seconds `down` gives a bucket's rclone, after unmounting it, to upload its write cache.
UPLOAD_WAIT_S = 120
# SSH options of every connection a bastion makes for us.
_BATCH = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR")


def declared(profile: Profile) -> SshHosts | None:
    """The profile's ``ssh:`` section, None where it has none."""
    value: SshHosts | None = profile.section("ssh")
    return value


def section(profile: Profile, source: str = "profile") -> SshHosts:
    ssh = declared(profile)
    if ssh is None:
        raise UsageError(f"{source}: ssh: cloud ssh needs an `ssh:` section that lists the hosts")
    return ssh


def _identity(key: str | None, agent: bool | None, fallback: SshHosts) -> tuple[str, bool]:
    """(key file, use the agent) of a host or bastion: its own, else the section's."""
    if key is not None:
        return str(Path(key).expanduser()), False
    if agent:
        return "", True
    if fallback.identity_file is not None:
        return str(Path(fallback.identity_file).expanduser()), False
    return "", True


def proxy_command(jump: SshJump, ssh: SshHosts) -> str:
    """The ProxyCommand that reaches a host through ``jump`` (``ssh -W``)."""
    key, agent = _identity(jump.identity_file, jump.agent, ssh)
    argv = ["ssh", *_BATCH, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    if not agent:
        argv += ["-i", key, "-o", "IdentitiesOnly=yes"]
    port = jump.port or ssh.port
    if port != 22:
        argv += ["-p", str(port)]
    return shlex.join([*argv, "-W", "%h:%p", f"{jump.user or ssh.user}@{jump.address}"])


def node_name(host: SshHost, cluster: str, rank: int) -> str:
    return host.name or f"{cluster}-{rank}"


def hosts(plan: Plan) -> list[Host]:
    """The inventory, from the profile alone (pure): the head first, then the others."""
    return hosts_of(plan.profile, plan.source, plan.cluster)


def hosts_of(profile: Profile, source: str, cluster: str) -> list[Host]:
    """The hosts the profile lists for ``cluster`` (pure), named as its plan names them."""
    ssh = section(profile, source)
    out = []
    for rank, entry in enumerate(ssh.ordered()[: profile.resources.num_nodes]):
        key, agent = _identity(entry.identity_file, entry.agent, ssh)
        jump = entry.jump or ssh.jump
        out.append(
            Host(
                name=node_name(entry, cluster, rank),
                rank=rank,
                ssh_host=entry.address,
                private_ip=entry.cluster_ip,
                interface="",
                ssh_user=entry.user or ssh.user,
                ssh_port=entry.port or ssh.port,
                ssh_key=key,
                ssh_agent=agent,
                ssh_proxy=proxy_command(jump, ssh) if jump is not None else "",
            )
        )
    return out


def where(entry: SshHost, ssh: SshHosts) -> str:
    port = entry.port or ssh.port
    jump = entry.jump or ssh.jump
    text = f"{entry.user or ssh.user}@{entry.address}" + (f":{port}" if port != 22 else "")
    if entry.private_address:
        text += f", cluster address {entry.private_address}"
    if jump is not None:
        text += f", via {jump.user or ssh.user}@{jump.address}"
    return text


def bucket_ansible_vars(plan: Plan, ctx: Context) -> dict[str, Any]:
    """The storage role's S3 settings for ``ssh.buckets`` (empty without)."""
    buckets = section(plan.profile, plan.source).buckets
    if buckets is None:
        return {}
    return {
        "storage_backend": "s3",
        "storage_local_root": "",
        "storage_s3_region": buckets.region,
        "storage_s3_credentials_file": layout.BUCKET_CREDENTIALS,
        # An AWS API emulator's endpoint (RLINFRA_AWS_ENDPOINT_URL), never set against AWS.
        "storage_s3_endpoint": ctx.controller.aws_endpoint or "",
        # rclone mounts the buckets; installed where missing (a host that has them runs no apt).
        "base_extra_packages": ["rclone", "fuse3"],
    }


def bucket_key(plan: Plan, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The hosts' key for ``ssh.buckets`` from ``environ``; UsageError naming what is unset."""
    buckets = section(plan.profile, plan.source).buckets
    if buckets is None or not plan.profile.storage:
        return None
    missing = [name for name in buckets.env_names if not environ.get(name)]
    if missing:
        raise UsageError(
            f"{plan.source}: ssh.buckets: {' and '.join(missing)} not set in this environment; "
            "the hosts mount the S3 buckets with that key",
            "Export the key the hosts should use (ideally one that may use these buckets only), "
            "or name other variables in ssh.buckets.access_key_id_env/secret_access_key_env.",
        )
    key_id, secret = buckets.env_names
    return environ[key_id], environ[secret]


def expectations(plan: Plan) -> Expect:
    ssh = section(plan.profile, plan.source)
    profile = plan.profile
    head_ports = [*profile.ports]
    if profile.serving is not None and profile.serving.model is not None:
        head_ports.append(profile.serving.model.port)
    if profile.serving is not None and profile.serving.retrieval is not None:
        head_ports.append(profile.serving.retrieval.port)
    return Expect(
        cluster=plan.cluster,
        gpus_per_node=plan.gpus_per_node,
        min_free_gb=ssh.min_free_gb,
        max_clock_skew_s=ssh.max_clock_skew_s,
        ports=tuple(sorted(set(profile.network.ray.ports().values()))),
        head_ports=tuple(sorted(set(head_ports))),
        system_python=profile.software.python == "system",
        take_over=ssh.take_over,
    )


def detect_accelerator(profile: Profile, source: str, cluster: str) -> str | None:
    """The GPUs every host has, read with nvidia-smi over SSH (``ssh.detect_gpus``): "H100:8",
    or None when no host has any. Hosts that differ, or a GPU rlinfra has no name for, are
    refused (exit 2) before anything changes."""
    from concurrent.futures import ThreadPoolExecutor

    from rlinfra.accelerators import from_device_name
    from rlinfra.clouds.ssh.preflight import parse_probe

    nodes = hosts_of(profile, source, cluster)
    ask = _asker(cluster, nodes)
    with (
        ui.step(f"GPUs of {len(nodes)} host(s), from nvidia-smi"),
        ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool,
    ):
        answers = list(pool.map(ask, range(len(nodes))))
    field = f"{source}: ssh.detect_gpus"
    found: dict[str, str] = {}
    for node, answer in zip(nodes, answers, strict=True):
        if answer.error:
            raise UsageError(f"{field}: {node.name}: {answer.error}; nothing was changed")
        facts = parse_probe(answer.output)
        if facts.gpus is None or len(facts.gpu_names) != facts.gpus:
            raise UsageError(f"{field}: {node.name}: nvidia-smi's GPUs could not be read")
        kinds = {from_device_name(name) for name in facts.gpu_names}
        if None in kinds:
            unknown = next(n for n in facts.gpu_names if from_device_name(n) is None)
            raise UsageError(
                f"{field}: {node.name}: GPU {unknown!r} is not one rlinfra knows",
                "Declare resources.accelerators instead (and leave ssh.detect_gpus out).",
            )
        if len(kinds) > 1:
            raise UsageError(
                f"{field}: {node.name} has GPUs of several kinds ({', '.join(sorted(facts.gpu_names))})",
                "Declare resources.accelerators instead (and leave ssh.detect_gpus out).",
            )
        found[node.name] = f"{kinds.pop()}:{facts.gpus}" if facts.gpus else "none"
    if len(set(found.values())) > 1:
        seen = ", ".join(f"{name} {spec}" for name, spec in found.items())
        raise UsageError(
            f"{field}: the hosts differ ({seen}); a cluster's nodes must have the same GPUs",
            "Give hosts of one kind, or declare resources.accelerators.",
        )
    spec = next(iter(found.values()))
    return None if spec == "none" else spec


def with_detected_gpus(profile: Profile, source: str, cluster: str) -> tuple[Profile, Override]:
    """The profile with the hosts' GPUs as its resources.accelerators, and the change to show."""
    spec = detect_accelerator(profile, source, cluster)
    ssh = section(profile, source)
    resources = profile.resources.model_copy(update={"accelerators": [spec] if spec else None})
    profile = profile.model_copy(
        update={"ssh": ssh.model_copy(update={"detect_gpus": False}), "resources": resources}
    )
    ui.info(f"GPUs detected on the hosts: {spec or 'none (CPU nodes)'}")
    return profile, Override("resources.accelerators", "detect", spec or "none")


def _asker(cluster: str, nodes: list[Host]) -> Callable[[int], Answer]:
    """Runs the read-only probe on ``nodes[index]`` (preflight and GPU detection)."""
    folder = deployment_dir(cluster)

    def ask(index: int) -> Answer:
        return probe_host([*_argv(folder, nodes[index], known_hosts="/dev/null"), "sh -s"])

    return ask


def _argv(folder: Path, host: Host, known_hosts: str | None = None) -> list[str]:
    from rlinfra.runners import ssh

    # Not interactive: ssh_argv asks for BatchMode.
    return ssh.ssh_argv(folder, host, known_hosts=known_hosts)


# ---------------------------------------------------------------- down


def _mount_paths(record: Record) -> list[str]:
    storage = (record.resolved_profile or {}).get("storage") or []
    return [str(item["mount_path"]) for item in storage if item.get("mount_path")]


def release_script(mounts: list[str], purge: bool) -> str:
    """What `down` runs on a host (as root): stop rlinfra's processes, unmount its buckets,
    remove the node contract; with ``purge`` also /opt/rlinfra and rlinfra's system files.

    A process is rlinfra's when its executable or command line lies under /opt/rlinfra, or it
    runs with the cluster's Ray token (RAY_AUTH_TOKEN_PATH under /opt/rlinfra): Ray's servers
    and workers and everything the jobs started. `ray stop` is not used: it stops every Ray the
    host runs, rlinfra's or not."""
    quoted = " ".join(shlex.quote(m) for m in mounts)
    contract = " ".join(f"{RLINFRA_ROOT}/{name}" for name in CONTRACT)
    lines = [
        "set -u",
        f"R={RLINFRA_ROOT}",
        # Each process: pid, parent, and whether it is rlinfra's by itself; then every
        # descendant of one that is (Ray's agents rewrite their command line and environment).
        "ours() {",
        "  for p in /proc/[0-9]*; do",
        "    pid=${p#/proc/}",
        '    [ "$pid" = $$ ] && continue',
        '    ppid=$(sed "s/^.*) //" "$p/stat" 2>/dev/null | cut -d" " -f2)',
        '    case "$(readlink "$p/exe" 2>/dev/null) $({ tr "\\0" " " < "$p/cmdline"; } 2>/dev/null)'
        ' $({ tr "\\0" "\\n" < "$p/environ"; } 2>/dev/null | grep "^RAY_AUTH_TOKEN_PATH=")" in',
        '      *"$R/"*) echo "$pid $ppid 1" ;;',
        '      *) echo "$pid $ppid 0" ;;',
        "    esac",
        "  done | awk '{up[$1] = $2; if ($3) hit[$1] = 1}",
        "    END {more = 1; while (more) {more = 0; for (p in up) if (!(p in hit) && (up[p] in hit))"
        " {hit[p] = 1; more = 1}}; for (p in hit) print p}'",
        "}",
        "running() {",
        "  for pid in $1; do",
        '    state=$(sed "s/^.*) //" "/proc/$pid/stat" 2>/dev/null | cut -c1)',
        '    [ -n "$state" ] && [ "$state" != Z ] && echo "$pid"',
        "  done",
        "}",
        "but_rclone() {",
        '  for pid in $1; do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = rclone ] || echo "$pid"; done',
        "}",
        # Every process found once stays on the list: an orphaned child is still rlinfra's.
        # rclone (a bucket's mount) is left to the end: the jobs stop writing first.
        'seen=""',
        "for signal in TERM TERM TERM TERM KILL KILL; do",
        '  seen=$(printf "%s\\n" $seen $(ours) | sort -un)',
        '  pids=$(but_rclone "$(running "$seen")")',
        '  [ -n "$pids" ] || break',
        '  kill -s "$signal" $pids 2>/dev/null || true',
        "  sleep 1",
        "done",
        # Unmounting a bucket ends its rclone once rclone has uploaded what its write cache
        # still holds (up to UPLOAD_WAIT_S); only then is anything left stopped.
        f"for m in {quoted}; do",
        '  if mountpoint -q "$m" 2>/dev/null; then umount "$m" 2>/dev/null || umount -l "$m"; fi',
        "done",
        f"for i in $(seq 1 {UPLOAD_WAIT_S}); do",
        '  seen=$(printf "%s\\n" $seen $(ours) | sort -un)',
        '  [ -n "$(running "$seen")" ] || break',
        "  sleep 1",
        "done",
        "for signal in TERM KILL; do",
        '  pids=$(running "$seen")',
        '  [ -n "$pids" ] || break',
        '  kill -s "$signal" $pids 2>/dev/null || true',
        "  sleep 1",
        "done",
        'left=$(running "$(printf "%s\\n" $seen $(ours) | sort -un)")',
        'if [ -n "$left" ]; then echo "processes left: $(echo $left)" >&2; exit 1; fi',
        f"rm -rf {contract}",
    ]
    if purge:
        lines += [
            'rm -rf "$R"',
            f"for f in {' '.join(SYSTEM_FILES)}; do",
            '  if [ -f "$f" ] && grep -q rlinfra "$f"; then rm -f "$f"; fi',
            "done",
            f'for m in {quoted}; do rmdir "$m" 2>/dev/null || true; done',
        ]
    lines.append("echo released")
    return "\n".join(lines) + "\n"


def _record_hosts(record: Record) -> list[Host]:
    """The cluster's hosts: the record's, or (after a `down`) the profile `up` resolved."""
    if record.hosts:
        return list(record.hosts)
    if record.resolved_profile is None:
        return []
    from rlinfra.plan import decide
    from rlinfra.profile import profile_from_data

    profile = profile_from_data(record.resolved_profile, "the cluster record", record.cluster)
    return hosts(decide(profile, "the cluster record", {CLOUD.name: CLOUD}, record.cluster))


class SshCloud(Cloud):
    """Existing machines over SSH; local buckets when they share this machine's files, S3
    buckets (ssh.buckets) otherwise."""

    name = "ssh"
    roots = ROOTS

    def up_question(self, plan: Plan) -> UpQuestion | None:
        return UpQuestion(
            f"This configures {plan.num_nodes} existing host(s) over SSH.", "nothing was changed"
        )

    def gather_facts(
        self, profile: Profile, source: str, cluster: str
    ) -> tuple[Profile, Override | None]:
        """With ``ssh.detect_gpus``: the GPUs the hosts have (read-only SSH) as the profile's
        resources.accelerators."""
        ssh = declared(profile)
        if ssh is None or not ssh.detect_gpus:
            return profile, None
        return with_detected_gpus(profile, source, cluster)

    def with_take_over(self, plan: Plan) -> Plan:
        """The plan with ``ssh.take_over`` on (`up --take-over`), for this run."""
        import dataclasses

        ssh = section(plan.profile, plan.source)
        profile = plan.profile.model_copy(
            update={"ssh": ssh.model_copy(update={"take_over": True})}
        )
        return dataclasses.replace(plan, profile=profile)

    def site(self, profile: Profile, source: str, cluster: str, offered: set[str] | None) -> Site:
        ssh = section(profile, source)
        candidates = profile.resources.accelerator_candidates
        if len(candidates) > 1:
            raise UsageError(
                f"{source}: resources.accelerators: the ssh cloud's hosts are given; declare the "
                "one GPU kind and count they have (e.g. H100:8)"
            )
        if profile.storage and not ssh.shared_filesystem and ssh.buckets is None:
            raise UsageError(
                f"{source}: storage: local buckets (folders of this machine) need "
                "ssh.shared_filesystem: true, and cloud buckets need ssh.buckets",
                "Set ssh.buckets: {cloud: aws, region: REGION} (S3, mounted with a key you give), "
                "or ssh.shared_filesystem when the hosts see RLINFRA_HOME, or remove storage.",
            )
        if ssh.buckets is not None:
            named_by_env = bool(profile.env.get(BUCKET_ENV, "").strip())
            unnamed = [
                i
                for i, item in enumerate(profile.storage)
                if item.bucket is None and not (i == 0 and named_by_env)
            ]
            if unnamed:
                raise UsageError(
                    f"{source}: storage[{unnamed[0]}].bucket: S3 bucket names are global, and no "
                    "account of the ssh cloud tells yours apart; give each bucket its exact name",
                    "Set storage[].bucket (or --env CHECKPOINT_BUCKET_NAME=NAME for the first).",
                )
        ordered = ssh.ordered()[: profile.resources.num_nodes]
        names = tuple(node_name(h, cluster, rank) for rank, h in enumerate(ordered))
        if len(set(names)) != len(names):
            raise UsageError(f"{source}: ssh.hosts: two hosts are called {names[0]!r}")
        return Site(
            accelerator=candidates[0] if candidates else None,
            node_names=names,
            node_where=tuple(where(h, ssh) for h in ordered),
        )

    def tfvars(self, plan: Plan, ctx: Context) -> dict[str, dict[str, Any]]:
        if not plan.storage_buckets:
            return {}
        buckets = section(plan.profile, plan.source).buckets
        if buckets is not None:
            return {
                "storage": {
                    **common_tfvars(buckets.region, plan.profile.name, ctx),
                    "buckets": plan.storage_buckets,
                }
            }
        return {
            "storage": {"buckets": plan.storage_buckets, "bucket_root": str(local.bucket_root(ctx))}
        }

    def ansible_vars(self, plan: Plan, ctx: Context) -> dict[str, Any]:
        """Hosts that share this machine's files get the local cloud's shared cache and buckets."""
        ssh = section(plan.profile, plan.source)
        python = plan.profile.software.python
        if ssh.shared_filesystem:
            return {
                **local.CLOUD.ansible_vars(plan, ctx),
                # The hosts' /etc may be this machine's (or shared): limits stay as they are.
                "base_manage_limits": False,
                # uv comes through SSH (the local cloud's staged copy is not made for this cloud).
                "python_env_uv_binary_host_src": "",
                **(bucket_ansible_vars(plan, ctx) if plan.profile.storage else {}),
            }
        return {
            "python_env_python": "python3" if python == "system" else python,
            # Under /opt/rlinfra, so that `down --purge` takes it with everything else.
            "python_env_cache_dir": f"{RLINFRA_ROOT}/cache/uv",
            "storage_backend": "local",
            "storage_local_root": "",
            **(bucket_ansible_vars(plan, ctx) if plan.profile.storage else {}),
        }

    def check_inputs(self, plan: Plan) -> None:
        for host in hosts(plan):
            if host.ssh_key and not os.path.isfile(host.ssh_key):
                raise UsageError(
                    f"{plan.source}: ssh: identity file {host.ssh_key} of {host.name} does not exist"
                )
        if bucket_key(plan, os.environ) is not None and not credentials_configured(os.environ):
            raise UsageError(
                f"{plan.source}: ssh.buckets: Terraform makes the S3 buckets with this "
                "machine's AWS credentials, and none are configured",
                "Set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY here (`aws "
                "configure`); the hosts use the ssh.buckets key instead.",
            )

    def root_source(self, plan: Plan, root: str) -> tuple[str, tuple[str, ...]]:
        if root == "storage" and section(plan.profile, plan.source).buckets is not None:
            return S3_ROOT_DIR, S3_ROOT_MODULES
        return super().root_source(plan, root)

    def before_configure(self, plan: Plan, folder: Path, nodes: list[Host]) -> None:
        """Write the hosts' bucket key to each host's BUCKET_CREDENTIALS (0600, its folder 0700),
        through SSH's standard input: never in an argument, a rendered file or Ansible's hands."""
        key = bucket_key(plan, os.environ)
        if key is not None:
            send_bucket_key(folder, nodes, key)

    def store(self, folder: Path) -> Store | None:
        """S3 where the deployment's buckets are (its storage root is the S3 one); none for
        local buckets."""
        import json

        tfvars = folder / "terraform" / "storage" / "terraform.tfvars.json"
        return S3 if tfvars.is_file() and "region" in json.loads(tfvars.read_text()) else None

    def account_id(self, environ: Mapping[str, str], required: bool) -> str | None:
        return None

    def profile_account(self, profile: Profile) -> str | None:
        # Local buckets are folders of this machine: no account tells them apart.
        return "ssh"

    def preflight(self, plan: Plan) -> None:
        """Every host at once, read-only: refused (exit 2) with one line per failing host."""
        self.check_inputs(plan)
        nodes = hosts(plan)
        ask = _asker(plan.cluster, nodes)
        with ui.step(f"preflight of {len(nodes)} host(s) over SSH"):
            failing, notes = check_hosts([h.name for h in nodes], ask, expectations(plan))
        for note in notes:
            ui.warn(note)
        if failing:
            for line in failing:
                ui.err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
            raise UsageError(
                f"preflight refused {len(failing)} of {len(nodes)} host(s); nothing was changed",
                "Fix what each line says (or pass --take-over for hosts of another cluster or "
                "Ray).",
            )

    def hosts_from_outputs(self, outputs: dict[str, Any]) -> list[Host]:
        raise NotImplementedError("the ssh cloud has no cluster root: see hosts_from_plan")

    def hosts_from_plan(self, plan: Plan, ctx: Context) -> list[Host] | None:
        return hosts(plan)

    def check_context(self, plan: Plan, ctx: Context) -> None:
        if section(plan.profile, plan.source).shared_filesystem:
            local.CLOUD.check_context(plan, ctx)

    def release_lines(self, record: Record, purge: bool) -> list[str]:
        mounts = _mount_paths(record)
        lines = []
        for host in _record_hosts(record):
            lines.append(
                f"  release node {host.name} ({host.ssh_user}@{host.ssh_host}; the machine is "
                "kept): stop Ray and rlinfra's processes"
                + (f", unmount {', '.join(mounts)}" if mounts else "")
                + f", remove the node contract ({', '.join(CONTRACT)} under {RLINFRA_ROOT})"
            )
            if purge:
                lines.append(
                    f"    PURGE on {host.name}: {RLINFRA_ROOT} (venv, tools, caches), "
                    + ", ".join(SYSTEM_FILES)
                    + " (where rlinfra wrote them)"
                    + (f", the empty mount folders {', '.join(mounts)}" if mounts else "")
                )
        return lines

    def release_hosts(self, folder: Path, record: Record, purge: bool) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from rlinfra.runners import ssh

        nodes = _record_hosts(record)
        script = release_script(_mount_paths(record), purge)

        def release(host: Host) -> str | None:
            command = "sh -s" if host.ssh_user == "root" else "sudo -n sh -s"
            try:
                done = ssh_run(folder, host, command, script)
            except OSError as exc:
                return f"{host.name}: {exc}"
            if done[0] != 0 or "released" not in done[1]:
                detail = (done[2].strip().splitlines() or ["no output"])[-1]
                return f"{host.name}: {detail} (exit {done[0]})"
            return None

        def ssh_run(folder: Path, host: Host, command: str, text: str) -> tuple[int, str, str]:
            import subprocess

            argv = [*ssh.ssh_argv(folder, host), command]
            try:
                result = subprocess.run(
                    argv, input=text, capture_output=True, text=True, timeout=180, check=False
                )
            except subprocess.TimeoutExpired:
                return 124, "", "no answer within 180 s"
            return result.returncode, result.stdout, result.stderr

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(nodes)))) as pool:
            failed = [line for line in pool.map(release, nodes) if line]
        if failed:
            raise OperationError(
                f"could not release {len(failed)} of {len(nodes)} host(s): {failed[0]}"
                + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""),
                "Fix the host and run `down` again; the cluster record is kept until it succeeds.",
            )


CLOUD = SshCloud()
