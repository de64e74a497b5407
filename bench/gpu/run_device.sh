#!/usr/bin/env bash
# The GPU branch of the node roles, run for real on one GPU machine with a local Ansible
# connection, then the acceptance check's own entry point. Writes its results under $OUT
# (default bench/gpu/out). Needs: python3 with a CUDA build of torch, nvidia-smi, and a folder
# of wheels for ansible-core and its needs (RLINFRA_ANSIBLE_WHEELS; see docs/gpu.md for the
# `pip download` line). Nothing is fetched: it runs with no network.
#
#   bash bench/gpu/run_device.sh
#
# Steps (each logged to $OUT/device.log; a failed step is recorded and the next ones still run):
#   1. the machine: python, torch, nvidia-smi, NCCL variables
#   2. ansible-core into a throwaway venv (--system-site-packages), from the wheels only
#   3. playbooks/gpu_node.yml against localhost (ansible_connection=local), 1 GPU per node,
#      node venv = python3's own environment (torch from the image): preflight, tree, CUDA
#      check, network, node contract, node-local NCCL acceptance check
#   4. the same playbook again: it must change nothing
#   5. the CUDA check with a wrong count (2): must fail and name the node
#   6. the acceptance entry point directly: NCCL, world size 1, 1 MiB .. 1 GiB, GPU health
#   7. tests/ansible/test_gpu_branch.py (its GPU tests run here instead of skipping)
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$REPO/bench/gpu/out}
WHEELS=${RLINFRA_ANSIBLE_WHEELS:-$REPO/.whl/gpu-ansible}
WORK=$(mktemp -d /tmp/rlinfra-gpu.XXXXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device.log") 2>&1

# NVLink multicast stays off (NVLS), as the machine's operators require; nothing here turns it on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_NOCOLOR=1 ANSIBLE_CONFIG="$REPO/ansible/ansible.cfg"
export ANSIBLE_LOCAL_TEMP="$WORK/ansible-local" ANSIBLE_REMOTE_TEMP="$WORK/ansible-remote"
PY=$(command -v python3)
declare -A STEP_RC=()
step() { # step NAME CMD...: run, log, remember the exit status
    local name=$1
    shift
    echo "=== step $name: $*"
    local start=$SECONDS
    "$@"
    STEP_RC[$name]=$?
    echo "=== step $name: exit ${STEP_RC[$name]} after $((SECONDS - start)) s"
}

machine() {
    "$PY" - <<'EOF'
import json, os, platform, sys
import torch
info = {
    "python": sys.version.split()[0], "python_executable": sys.executable, "prefix": sys.prefix,
    "kernel": platform.release(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(), "device_count": torch.cuda.device_count(),
    "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "",
    "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))},
}
print(json.dumps(info, indent=1))
EOF
    nvidia-smi
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv
    command -v ip || echo "no ip command (iproute2) on this machine"
}

install_ansible() {
    local venv=$WORK/ansible-venv
    "$PY" -m venv --system-site-packages "$venv" || "$PY" -m venv --without-pip --system-site-packages "$venv" || return 1
    if "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        "$venv/bin/python" -m pip install -q --no-index --no-cache-dir --find-links "$WHEELS" ansible-core
    else
        "$PY" -m pip --python "$venv/bin/python" install -q --no-index --no-cache-dir --find-links "$WHEELS" ansible-core
    fi || return 1
    export PATH="$venv/bin:$PATH"
    ansible-playbook --version
}

# This node's interface and private address: the first non-loopback interface with an IPv4
# address (read with ioctl, since the image may lack iproute2), else lo and 127.0.0.1.
read -r IFACE IP < <("$PY" - <<'EOF'
import fcntl, socket, struct
found = ("lo", "127.0.0.1")
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _, name in socket.if_nameindex():
    try:
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
    except OSError:
        continue
    if name != "lo":
        found = (name, socket.inet_ntoa(packed[20:24]))
        break
print(*found)
EOF
)
# The network role reads interfaces with `ip`; where the image has none (and no network to
# install iproute2, which the base role would do), the step is skipped and its result given.
if command -v ip >/dev/null; then
    NET_ARGS=()
else
    NET_ARGS=(--skip-tags network -e "network_collective_interface=$IFACE")
fi
PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')

cat >"$WORK/inventory.yml" <<EOF
all:
  children:
    rlinfra_nodes:
      children:
        rlinfra_head:
          hosts:
            gpu0:
              ansible_connection: local
              ansible_python_interpreter: $PY
              rlinfra_node_rank: 0
              rlinfra_private_ip: $IP
EOF
cat >"$WORK/vars.yml" <<EOF
preflight_expected_num_nodes: 1
# The node venv is python3's own environment (the image's torch); nothing is installed.
python_env_venv: $PREFIX
python_env_check_imports: {torch: ""}
node_env_cluster_name: gpu-device
node_env_cloud: device
node_env_task_id: gpu-device-check
node_env_gpus_per_node: 1
ray_cluster_num_gpus: 1
acceptance_expected_gpus_per_node: 1
acceptance_sizes_mib: [1, 4, 16, 64, 256, 1024]
acceptance_warmup_iters: 5
acceptance_iters: 20
acceptance_timeout_s: 300
acceptance_collective_env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
acceptance_result_dest: $OUT/check.json
EOF

play() { # play NAME EXTRA...: run gpu_node.yml, keep the recap
    local name=$1
    shift
    ansible-playbook -i "$WORK/inventory.yml" -e @"$WORK/vars.yml" "${NET_ARGS[@]}" "$@" \
        "$REPO/ansible/playbooks/gpu_node.yml" 2>&1 | tee "$WORK/$name.log"
}

wrong_count() { # the CUDA check must fail, naming the node, when the profile says 2 GPUs
    play wrong-count --tags preflight,cuda -e node_env_gpus_per_node=2
    local rc=$?
    grep -q "node gpu0: the profile expects 2 GPU(s) per node but nvidia-smi sees 1" "$WORK/wrong-count.log" &&
        grep -q "torch.cuda.device_count() sees 1" "$WORK/wrong-count.log" && [ "$rc" -ne 0 ]
}

low_floor() { # GPU health floors far above an H200 must fail, naming the GPU and its figures
    play low-floor --tags acceptance -e acceptance_min_matmul_tflops=5000 -e acceptance_min_copy_gbps=50000 \
        -e acceptance_result_dest=
    local rc=$?
    grep -q "GPU(s) below the floors" "$WORK/low-floor.log" && [ "$rc" -ne 0 ]
}

entry_point() { # NCCL's log goes to stderr (the device log); the result JSON alone to entry.json
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV NCCL_DEBUG_FILE=/dev/stderr \
        "$PY" "$REPO/ansible/roles/acceptance/files/allreduce.py" \
        --launcher local --backend nccl --sizes-mib 1,2,4,8,16,32,64,128,256,512,1024 \
        --warmup 5 --iters 20 --timeout-s 300 >"$WORK/entry.out"
    local rc=$?
    grep '^{' "$WORK/entry.out" | tail -n 1 >"$OUT/entry.json"
    return $rc
}

step machine machine
step install_ansible install_ansible
step play_first play first
step play_second play second
grep -qE "^gpu0 +: .*changed=0 .*failed=0" "$WORK/second.log"
STEP_RC[second_changed_nothing]=$?
step wrong_count wrong_count
step low_floor low_floor
step cuda_check_direct sh -c "'$PY' '$REPO/ansible/roles/python_env/files/check_cuda.py' --expected-gpus 1 --host gpu0 >'$OUT/cuda.json'"
step entry_point entry_point
step pytest "$PY" -m pytest -q -p no:cacheprovider "$REPO/tests/ansible/test_gpu_branch.py"

"$PY" - "$OUT" "$IP" "$IFACE" "${#NET_ARGS[@]}" <<EOF
import json, sys
doc = {
    "steps": {$(for k in "${!STEP_RC[@]}"; do printf '"%s": %s, ' "$k" "${STEP_RC[$k]}"; done)},
    "private_ip": sys.argv[2],
    "interface": sys.argv[3],
    "network_role": "skipped: no ip command (iproute2)" if sys.argv[4] != "0" else "run",
}
json.dump(doc, open(sys.argv[1] + "/steps.json", "w"), indent=1, sort_keys=True)
EOF
"$PY" "$REPO/bench/gpu/summarise.py" "$OUT"
