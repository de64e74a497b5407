"""The `ssh` cloud without any host: profile validation, plan and render, the inventory with a
bastion, and preflight's parsing and judgement of each kind of refusal (from probe text alone)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from helpers.cli import CliResult, files_under, usage_line, write_yaml
from rlinfra.clouds.planning import make_plan
from rlinfra.clouds.ssh import cloud as ssh_cloud
from rlinfra.clouds.ssh.preflight import Answer, Expect, check_hosts, judge, parse_probe
from rlinfra.profile import profile_from_data

Cli = Callable[..., CliResult]

BASE = {
    "cloud": "ssh",
    "ssh": {
        "identity_file": "/keys/id",
        "hosts": [
            {"name": "gpu-a", "address": "192.0.2.10"},
            {"name": "gpu-b", "address": "gpu-b.internal", "private_address": "10.0.0.11"},
        ],
    },
}


def test_every_host_is_a_node_head_first_and_named() -> None:
    data = {**BASE, "ssh": {**BASE["ssh"], "head": "gpu-b"}}  # type: ignore[dict-item]
    profile = profile_from_data(data, "p.yaml", "mine")
    assert profile.resources.num_nodes == 2
    plan = make_plan(profile, "p.yaml")
    assert [(n.name, n.role) for n in plan.nodes] == [("gpu-b", "head"), ("gpu-a", "worker")]
    assert plan.nodes[0].where == "root@gpu-b.internal, cluster address 10.0.0.11"
    hosts = ssh_cloud.hosts(plan)
    assert [(h.ssh_host, h.private_ip, h.ssh_key) for h in hosts] == [
        ("gpu-b.internal", "10.0.0.11", "/keys/id"),
        ("192.0.2.10", "192.0.2.10", "/keys/id"),
    ]
    # -n 1 takes the head alone.
    one = make_plan(profile_from_data({**data, "resources": {"num_nodes": 1}}, "p", "m"), "p")
    assert [n.name for n in one.nodes] == ["gpu-b"]


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"ssh": None}, ["p.yaml", "cloud ssh needs an `ssh:` section"]),
        ({"ssh": {"hosts": []}}, ["ssh.hosts", "at least one host"]),
        (
            {"ssh": {"hosts": [{"address": "10.0.0.1", "prot": 22}]}},
            ["ssh.hosts[0].prot", "'port'"],
        ),
        ({"ssh": {"hosts": [{"address": "10.0.0.1", "port": 0}]}}, ["ssh.hosts[0].port", "range"]),
        ({"ssh": {"hosts": [{"address": "db.lan"}]}}, ["ssh.hosts[0]", "private_address"]),
        (
            {"ssh": {"hosts": [{"address": "10.0.0.1"}], "head": "x"}},
            ["ssh", "head 'x' is not a host name"],
        ),
        (
            {"ssh": {"hosts": [{"address": "10.0.0.1"}, {"address": "10.0.0.1"}]}},
            ["ssh.hosts", "repeats hosts[0]"],
        ),
        (
            {"ssh": {"hosts": [{"address": "10.0.0.1"}], "jump": {"address": "b", "user": "A B"}}},
            ["ssh.jump.user", "not a user name"],
        ),
        (
            {"ssh": {"hosts": [{"address": "10.0.0.1"}], "agent": True, "identity_file": "k"}},
            ["ssh", "identity_file or agent"],
        ),
        ({"resources": {"num_nodes": 3}}, ["resources.num_nodes 3", "2 host(s)"]),
        ({"cloud": "local"}, ["ssh is for cloud ssh only"]),
        ({"resources": {"accelerators": ["H100:8", "A100:8"]}}, ["resources.accelerators"]),
        (
            {"storage": [{"bucket": "ckpt-bucket", "mount_path": "/checkpoints"}]},
            ["storage", "ssh.shared_filesystem"],
        ),
    ],
)
def test_bad_ssh_profiles_are_one_line_exit_2(
    cli: Cli, home: Path, tmp_path: Path, change: dict[str, object], fragments: list[str]
) -> None:
    data = {**BASE, **change}
    if data.get("ssh") is None:
        data.pop("ssh")
    path = write_yaml(tmp_path, data)
    for command in ("validate", "plan"):
        line = usage_line(cli(command, "-p", str(path)))
        for fragment in fragments:
            assert fragment in line, (fragment, line)
    assert files_under(home) == []


def test_plan_shows_the_hosts_without_prices_or_terraform(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    data = {**BASE, "ssh": {**BASE["ssh"], "jump": {"address": "bastion.example", "user": "ops"}}}  # type: ignore[dict-item]
    path = write_yaml(tmp_path, data)
    shown = cli("plan", "-p", str(path))
    assert shown.code == 0, shown.err
    assert "+ node gpu-a (head, root@192.0.2.10, via ops@bastion.example)" in shown.out
    assert "candidates" not in shown.out and "USD" not in shown.out
    summary = json.loads(cli("plan", "-p", str(path), "--json").out)
    assert summary["cloud"] == "ssh" and summary["candidates"] == []
    assert [n["name"] for n in summary["nodes"]] == ["gpu-a", "gpu-b"]
    out = tmp_path / "review"
    assert cli("render", "-p", str(path), "--out", str(out)).code == 0
    assert not (out / "terraform").exists()
    assert files_under(home) == []


def test_inventory_goes_through_the_bastion_with_each_hosts_key_and_port(tmp_path: Path) -> None:
    from rlinfra.context import Context, Controller
    from rlinfra.render import render_inventory

    data = {
        "cloud": "ssh",
        "ssh": {
            "user": "ubuntu",
            "agent": True,
            "jump": {"address": "203.0.113.5", "user": "ops", "identity_file": "/keys/bastion"},
            "hosts": [
                {"address": "10.1.0.5", "port": 2222, "identity_file": "/keys/a"},
                {"address": "10.1.0.6", "user": "root"},
            ],
        },
    }
    plan = make_plan(profile_from_data(data, "p.yaml", "edge"), "p.yaml")
    ctx = Context(tmp_path, tmp_path, tmp_path, "", "t", Controller("uv", "python3", None))
    inventory = yaml.safe_load(render_inventory(plan, ssh_cloud.hosts(plan), ctx))
    groups = inventory["all"]["children"]["rlinfra_nodes"]["children"]
    head = groups["rlinfra_head"]["hosts"]["edge-0"]
    worker = groups["rlinfra_workers"]["hosts"]["edge-1"]
    assert head["ansible_port"] == 2222 and head["ansible_ssh_private_key_file"] == "/keys/a"
    assert head["ansible_become"] is True  # ubuntu: passwordless sudo
    assert "ansible_ssh_private_key_file" not in worker  # the agent
    assert "ansible_become" not in worker and "ansible_port" not in worker
    for hostvars in (head, worker):
        args = shlex.split(hostvars["ansible_ssh_common_args"])
        assert args[0] == "-o" and args[1].startswith("ProxyCommand=")
        proxy = shlex.split(args[1].removeprefix("ProxyCommand="))
        assert proxy[-3:] == ["-W", "%h:%p", "ops@203.0.113.5"]
        assert proxy[proxy.index("-i") + 1] == "/keys/bastion"


INVENTORY_INI = """
# the team's own inventory
[gpu]
gpu-a ansible_host=192.0.2.10 ansible_port=2222
10.0.0.12 ansible_user=ubuntu
; a comment line
gpu-c ansible_host=gpu-c.lan rlinfra_private_address=10.0.0.13

[cpu]
db-1 ansible_host=192.0.2.99

[gpu:vars]
ansible_ssh_private_key_file=/keys/team
ansible_user=admin
"""

INVENTORY_YAML = {
    "all": {
        "children": {
            "gpu": {
                "hosts": {
                    "gpu-a": {"ansible_host": "192.0.2.10", "ansible_port": 2222},
                    "10.0.0.12": {"ansible_user": "ubuntu"},
                    "gpu-c": {"ansible_host": "gpu-c.lan", "rlinfra_private_address": "10.0.0.13"},
                },
                "vars": {"ansible_ssh_private_key_file": "/keys/team", "ansible_user": "admin"},
            },
            "cpu": {"hosts": {"db-1": {"ansible_host": "192.0.2.99"}}},
        }
    }
}


@pytest.mark.parametrize("kind", ["ini", "yaml"])
def test_hosts_come_from_an_ansible_inventory_file(
    cli: Cli, home: Path, tmp_path: Path, kind: str
) -> None:
    """`ssh.inventory` (INI or YAML, relative to the profile) and `inventory_group`: the group's
    hosts in the file's order, group variables under each host's own."""
    if kind == "ini":
        (tmp_path / "hosts.ini").write_text(INVENTORY_INI)
    else:
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump(INVENTORY_YAML, sort_keys=False))
    name = "hosts.ini" if kind == "ini" else "hosts.yml"
    path = write_yaml(
        tmp_path, {"cloud": "ssh", "ssh": {"inventory": name, "inventory_group": "gpu"}}
    )
    summary = json.loads(cli("plan", "-p", str(path), "--json").out)
    assert [n["name"] for n in summary["nodes"]] == ["gpu-a", "p-1", "gpu-c"]
    from rlinfra.profile import load_profile

    profile, _ = load_profile(str(path))
    assert profile.ssh is not None
    assert profile.ssh.inventory == str(tmp_path / name)
    hosts = [h.model_dump(exclude_none=True) for h in profile.ssh.hosts]
    assert hosts == [
        {
            "name": "gpu-a",
            "address": "192.0.2.10",
            "port": 2222,
            "user": "admin",
            "identity_file": "/keys/team",
        },
        {"address": "10.0.0.12", "user": "ubuntu", "identity_file": "/keys/team"},
        {
            "name": "gpu-c",
            "address": "gpu-c.lan",
            "private_address": "10.0.0.13",
            "user": "admin",
            "identity_file": "/keys/team",
        },
    ]
    # Without a group: every host of the file.
    path = write_yaml(tmp_path, {"cloud": "ssh", "ssh": {"inventory": name}})
    summary = json.loads(cli("plan", "-p", str(path), "--json").out)
    assert [n["name"] for n in summary["nodes"]] == ["gpu-a", "p-1", "gpu-c", "db-1"]
    assert files_under(home) == []


def test_inventory_follows_ansibles_order_of_group_variables_and_host_ports(
    tmp_path: Path,
) -> None:
    """A child group's variables win over its parent's wherever they are written, `all:vars`
    come first, a host's own last; `name:port` gives the port."""
    from rlinfra.clouds.ssh.inventory import read_inventory

    path = tmp_path / "hosts.ini"
    path.write_text(
        "[a100:vars]\nansible_user=child\n\n"
        "[gpu:children]\na100\n\n"
        "[gpu:vars]\nansible_user=parent\nansible_port=2200\n\n"
        "[all:vars]\nansible_ssh_private_key_file=/keys/all\nansible_user=everyone\n\n"
        "[a100]\nnode-1:2222\nnode-2 ansible_ssh_user=own\n\n"
        "[gpu]\nnode-3\n"
    )
    assert read_inventory(path, "gpu") == [
        {
            "address": "node-1",
            "name": "node-1",
            "port": 2222,
            "user": "child",
            "identity_file": "/keys/all",
        },
        {
            "address": "node-2",
            "name": "node-2",
            "port": 2200,
            "user": "own",
            "identity_file": "/keys/all",
        },
        {
            "address": "node-3",
            "name": "node-3",
            "port": 2200,
            "user": "parent",
            "identity_file": "/keys/all",
        },
    ]


@pytest.mark.parametrize(
    ("inventory", "ssh", "fragments"),
    [
        (
            "[gpu]\ngpu-a ansible_host=10.0.0.1\n",
            {"hosts": [{"address": "10.0.0.9"}]},
            ["p.yaml: ssh.inventory", "not both"],
        ),
        ("[gpu]\nnode[1:4] ansible_user=x\n", {}, ["inv.ini: line 2", "host patterns"]),
        ("[gpu]\ngpu-a ansible_host\n", {}, ["inv.ini: line 2", "not key=value"]),
        ("[gpu]\ngpu-a\n", {"inventory_group": "tpu"}, ["inv.ini", "no group 'tpu'"]),
        ("[gpu]\ngpu-a ansible_port=x\n", {}, ["p.yaml: ssh.hosts[0].port"]),
        (None, {}, ["p.yaml: ssh.inventory", "no such file"]),
        ("[gpu]\ngpu-a x=1 ; note\n", {}, ["inv.ini: line 2", "not key=value"]),
        ("[gpu]\ngpu-a ansible_connection=local\n", {}, ["gpu-a.ansible_connection", "SSH"]),
        (
            "[gpu]\ngpu-a ansible_ssh_common_args='-J b'\n",
            {},
            ["gpu-a.ansible_ssh_common_args", "ssh.jump"],
        ),
        ("[gpu]\ngpu-a ansible_host='{{ x }}.lan'\n", {}, ["gpu-a.ansible_host", "template"]),
    ],
)
def test_bad_inventories_are_one_line_exit_2(
    cli: Cli,
    home: Path,
    tmp_path: Path,
    inventory: str | None,
    ssh: dict[str, object],
    fragments: list[str],
) -> None:
    if inventory is not None:
        (tmp_path / "inv.ini").write_text(inventory)
    path = write_yaml(tmp_path, {"cloud": "ssh", "ssh": {"inventory": "inv.ini", **ssh}})
    for command in ("validate", "plan"):
        line = usage_line(cli(command, "-p", str(path)))
        for fragment in fragments:
            assert fragment in line, (fragment, line)
    assert files_under(home) == []


# ---------------------------------------------------------------- preflight

GOOD = """uid=0
sudo=root
os=ubuntu
os_like=debian
os_version=22.04
python=3.11
disk_free_kb=104857600
gpus=none
listening=22 53
contract=
installed=
ray=
clock={clock}
probe=done
"""

EXPECT = Expect(
    cluster="mine",
    gpus_per_node=0,
    min_free_gb=10,
    max_clock_skew_s=5,
    ports=(6379, 8265, 10001, 52365),
    head_ports=(9090,),
    system_python=True,
)


def problems(text: str, expect: Expect = EXPECT, head: bool = True) -> list[str]:
    now = 1_000_000.0
    return judge(
        parse_probe(text.replace("{clock}", str(now))), expect, head, now, now + 1
    ).problems


def test_a_good_host_passes_and_its_facts_parse() -> None:
    facts = parse_probe(GOOD.replace("{clock}", "12.5"))
    assert facts.python == (3, 11) and facts.gpus == 0 and facts.disk_free_gb == 100.0
    assert facts.listening == {22, 53} and facts.clock == 12.5 and facts.complete
    assert problems(GOOD) == []


CONTRACT = json.dumps({"RLINFRA_CLUSTER_INFO": json.dumps({"cluster": "other", "cloud": "ssh"})})


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ({"uid": "1000", "sudo": "no"}, "not root and no passwordless sudo"),
        ({"os": "centos", "os_like": "rhel fedora"}, "OS centos"),
        ({"python": "3.9"}, "python3 is 3.9, needs 3.10"),
        ({"python": "none"}, "no python3"),
        ({"disk_free_kb": "1048576"}, "1.0 GB free under /opt, needs 10 GB"),
        ({"gpus": "2"}, None),  # GPUs seen, none declared: a note, not a refusal
        ({"listening": "22 6379 9090"}, "port(s) 6379, 9090 already in use"),
        ({"clock": "999990.0"}, "clock 10.0 s behind"),
        ({"contract": CONTRACT}, "runs rlinfra cluster 'other'"),
        ({"ray": "raylet:/usr/local/lib/ray/raylet"}, "runs a Ray that rlinfra did not start"),
        ({"probe": ""}, "the probe did not finish"),
    ],
)
def test_each_kind_of_refusal_is_found(edit: dict[str, str], fragment: str | None) -> None:
    lines = [line.partition("=") for line in GOOD.splitlines()]
    text = "\n".join(f"{k}={edit.get(k, v)}" for k, _, v in lines)
    found = problems(text)
    if fragment is None:
        assert found == []
    else:
        assert len(found) == 1 and fragment in found[0], found


def test_gpu_count_must_match_the_declaration() -> None:
    expect = Expect(**{**EXPECT.__dict__, "gpus_per_node": 8})
    assert "0 GPU(s) seen by nvidia-smi, the profile declares 8" in problems(GOOD, expect)[0]
    assert problems(GOOD.replace("gpus=none", "gpus=8"), expect) == []


def test_own_cluster_and_take_over_are_not_refused() -> None:
    mine = json.dumps({"RLINFRA_CLUSTER_INFO": json.dumps({"cluster": "mine"})})
    rlinfra_ray = "raylet:/opt/rlinfra/venv/lib/python3.11/site-packages/ray/core/raylet"
    ours = GOOD.replace("contract=", f"contract={mine}").replace("ray=", f"ray={rlinfra_ray}")
    # Our own Ray holds the ports: a second `up` converges.
    assert problems(ours.replace("listening=22 53", "listening=22 6379 8265")) == []
    theirs = GOOD.replace("contract=", f"contract={CONTRACT}").replace(
        "ray=", "ray=gcs_server:/usr/bin/gcs_server"
    )
    assert len(problems(theirs)) == 2
    assert problems(theirs, Expect(**{**EXPECT.__dict__, "take_over": True})) == []
    # Service ports are the head's only.
    assert problems(GOOD.replace("listening=22 53", "listening=9090"), head=False) == []


def test_every_failing_host_is_one_line_and_unreachable_hosts_are_named() -> None:
    now = 1_000_000.0
    answers = {
        0: Answer(GOOD.replace("{clock}", str(now)), now, now + 1),
        1: Answer("", now, now + 1, "unreachable over SSH (Connection refused)"),
        2: Answer(
            GOOD.replace("{clock}", str(now))
            .replace("python=3.11", "python=3.6")
            .replace("uid=0\nsudo=root", "uid=5\nsudo=no"),
            now,
            now + 1,
        ),
    }
    failing, notes = check_hosts(["a", "b", "c"], answers.__getitem__, EXPECT)
    assert failing == [
        "b: unreachable over SSH (Connection refused)",
        "c: not root and no passwordless sudo (`sudo -n true` fails); python3 is 3.6, needs "
        "3.10 or newer for software.python: system",
    ]
    assert notes == []


def test_down_removes_only_rlinfras_files() -> None:
    kept = ssh_cloud.release_script(["/checkpoints"], purge=False)
    purged = ssh_cloud.release_script(["/checkpoints"], purge=True)
    removed = [line for line in kept.splitlines() if "rm " in line]
    assert removed == [
        "rm -rf /opt/rlinfra/node.env /opt/rlinfra/node.json /opt/rlinfra/converged "
        "/opt/rlinfra/ray /opt/rlinfra/jobs /opt/rlinfra/run /opt/rlinfra/secrets"
    ]
    extra = [
        line.strip()
        for line in purged.splitlines()
        if ("rm " in line or "rmdir " in line) and line not in kept
    ]
    assert extra == [
        'rm -rf "$R"',
        'if [ -f "$f" ] && grep -q rlinfra "$f"; then rm -f "$f"; fi',
        'for m in /checkpoints; do rmdir "$m" 2>/dev/null || true; done',
    ]


def test_the_probe_reads_a_node_contract_as_the_node_env_role_writes_it(tmp_path: Path) -> None:
    """The probe itself, run by sh on this machine with /opt/rlinfra moved to a folder of the
    test's: a contract whose values hold JSON escapes (newlines between IPs, quotes) is read."""
    import subprocess

    from rlinfra.clouds.ssh.preflight import PROBE

    (tmp_path / "node.json").write_text(
        json.dumps(
            {
                "RLINFRA_NODE_IPS": "10.0.0.1\n10.0.0.2",
                "RLINFRA_CLUSTER_INFO": json.dumps({"cluster": "mine", "cloud": "ssh"}),
            },
            indent=4,
        )
        + "\n"
    )
    script = PROBE.replace("/opt/rlinfra", str(tmp_path))
    done = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, timeout=60)
    facts = parse_probe(done.stdout)
    assert facts.complete, done.stdout
    assert facts.contract_cluster == "mine"
    assert facts.installed == ("node.json",)
    assert facts.clock is not None and facts.disk_free_gb is not None


# ---------------------------------------------------------------- GPUs detected (ssh.detect_gpus)

H100_ROW = "NVIDIA H100 80GB HBM3"


def _stand_in_nvidia_smi(folder: Path, names: list[str]) -> Path:
    """A host's nvidia-smi, answering the probe's two questions as the real one does."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = "".join(f"GPU {i}: {name} (UUID: GPU-{i:08d})\\n" for i, name in enumerate(names))
    rows = "".join(f"{name}\\n" for name in names)
    tool = folder / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'case "$1" in -L) printf "{listing}";; --query-gpu=name) printf "{rows}";; '
        "*) exit 9;; esac\n"
    )
    tool.chmod(0o755)
    return folder


def _hosts_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: dict[str, list[str] | None]
) -> list[str]:
    """Each host's probe runs the real probe script with sh on this machine, its PATH holding
    that host's stand-in nvidia-smi (or none); returns the hosts asked, in order."""
    asked: list[str] = []
    plain = "/usr/bin:/bin"

    def argv(folder: Path, host: object, known_hosts: str | None = None) -> list[str]:
        name = host.name  # type: ignore[attr-defined]
        asked.append(name)
        names = gpus[name]
        path = plain if names is None else f"{_stand_in_nvidia_smi(tmp_path / name, names)}:{plain}"
        # The probe's own argv ends with "sh -s", the remote command ssh would run.
        return ["sh", "-c", f'PATH={shlex.quote(path)}; export PATH; eval "$0"']

    monkeypatch.setattr(ssh_cloud, "_argv", argv)
    return asked


def _detecting(tmp_path: Path, **resources: object) -> Path:
    data = {**BASE, "ssh": {**BASE["ssh"], "detect_gpus": True}}  # type: ignore[dict-item]
    if resources:
        data["resources"] = resources
    return write_yaml(tmp_path, data)


@pytest.mark.parametrize(
    ("device", "name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", None),
        ("NVIDIA L40", None),
    ],
)
def test_nvidia_smi_names_map_to_the_profiles_names(device: str, name: str | None) -> None:
    from rlinfra.accelerators import from_device_name

    assert from_device_name(device) == name


def test_detected_gpus_become_the_plans_accelerators(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _hosts_with(monkeypatch, tmp_path, {"gpu-a": [H100_ROW] * 8, "gpu-b": [H100_ROW] * 8})
    path = _detecting(tmp_path)
    summary = json.loads(cli("plan", "-p", str(path), "--json").out)
    assert summary["accelerator"] == "H100:8"
    assert {"field": "resources.accelerators", "old": "detect", "new": "H100:8"}.items() <= next(
        o for o in summary["overrides"] if o["field"] == "resources.accelerators"
    ).items()
    assert sorted(asked) == ["gpu-a", "gpu-b"]
    # What the nodes get is sized by it: Ray's GPUs and the acceptance check's count.
    out = tmp_path / "review"
    assert cli("render", "-p", str(path), "--out", str(out)).code == 0
    rendered = "\n".join(p.read_text() for p in out.rglob("*.yml") if p.is_file())
    assert "ray_cluster_num_gpus: 8" in rendered
    assert "acceptance_expected_gpus_per_node: 8" in rendered
    assert files_under(home) == []


def test_hosts_without_gpus_are_cpu_nodes(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hosts_with(monkeypatch, tmp_path, {"gpu-a": None, "gpu-b": None})
    shown = cli("plan", "-p", str(_detecting(tmp_path)), "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["accelerator"] is None


@pytest.mark.parametrize(
    ("gpus", "fragments"),
    [
        (
            {"gpu-a": [H100_ROW] * 8, "gpu-b": [H100_ROW] * 4},
            ["ssh.detect_gpus: the hosts differ", "gpu-a H100:8", "gpu-b H100:4"],
        ),
        ({"gpu-a": [H100_ROW] * 8, "gpu-b": None}, ["the hosts differ", "gpu-b none"]),
        (
            {"gpu-a": ["NVIDIA GeForce RTX 4090"], "gpu-b": ["NVIDIA GeForce RTX 4090"]},
            ["gpu-a: GPU 'NVIDIA GeForce RTX 4090' is not one rlinfra knows"],
        ),
        (
            {"gpu-a": [H100_ROW, "NVIDIA L4"], "gpu-b": [H100_ROW] * 2},
            ["gpu-a has GPUs of several kinds"],
        ),
    ],
)
def test_detection_refuses_what_one_accelerator_cannot_say(
    cli: Cli,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpus: dict[str, list[str] | None],
    fragments: list[str],
) -> None:
    _hosts_with(monkeypatch, tmp_path, gpus)
    line = usage_line(cli("plan", "-p", str(_detecting(tmp_path))))
    assert "p.yaml: ssh.detect_gpus" in line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert files_under(home) == []


def test_declared_gpus_and_validate_ask_no_host(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _hosts_with(monkeypatch, tmp_path, {"gpu-a": None, "gpu-b": None})
    path = _detecting(tmp_path)
    assert cli("validate", "-p", str(path)).code == 0
    # --gpus says what the hosts have.
    summary = json.loads(cli("plan", "-p", str(path), "--gpus", "L4:2", "--json").out)
    assert summary["accelerator"] == "L4:2"
    assert asked == []
    both = _detecting(tmp_path, accelerators="H100:8")
    line = usage_line(cli("validate", "-p", str(both)))
    assert "declare the GPUs or detect them, not both" in line
