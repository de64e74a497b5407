#!/bin/bash
# Verl 0.6.0 main_ppo (PPO + critic) on one GPU through the project's own job path: a Ray head
# started as the node roles start it, then rlinfra_node.job_runner executing the job spec that
# `rlinfra render` made from bench/gpu/verl/gpu-ppo-hf.yaml (model step, data step, training
# through rlinfra_node.verl_cpu, merge); then the same runner on the resume spec (24 steps).
# Carried: .gpurun/ (job.json, job-resume.json from prepare.sh) and .whl/bundle.tar.xz.
# Device command: bash bench/gpu/verl/run.sh ; everything it reports lands in $OUT.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
export PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s)
mkdir -p /tmp/site && tar -xJf .whl/bundle.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$ROOT/driver
{
  echo "unpacked in $(( $(date +%s)-T0 ))s"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import sys,torch,transformers,ray,verl; print(sys.version.split()[0], "torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__, "ray", ray.__version__, "verl", verl.__version__)'
} 2>&1 | tee "$OUT/env.txt"
# GPU memory, sampled each second for the whole run (peak in summarise.py).
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -l 1 >"$OUT/gpu_mem.csv" 2>/dev/null &
python3 -m ray.scripts.scripts start --head --num-gpus 1 --include-dashboard=false \
  --disable-usage-stats 2>&1 | tail -3 | tee -a "$OUT/env.txt"
cd "$ROOT/driver" || exit 1
T1=$(date +%s)
timeout 300 python3 -m rlinfra_node.job_runner --spec "$ROOT/.gpurun/job.json" >"$OUT/job.txt" 2>&1
echo "job rc=$? wall=$(( $(date +%s)-T1 ))s" | tee -a "$OUT/job.txt"
ls /checkpoints /checkpoints/global_step_20 2>&1 | tee -a "$OUT/job.txt"
timeout 50 python3 "$ROOT/bench/gpu/verl/nan_check.py" /checkpoints/models/qwen2.5-0.5b-shapes >"$OUT/nan_check.txt" 2>&1
echo "nan_check rc=$?" >>"$OUT/nan_check.txt"
T2=$(date +%s)
timeout 150 python3 -m rlinfra_node.job_runner --spec "$ROOT/.gpurun/job-resume.json" >"$OUT/resume.txt" 2>&1
echo "resume rc=$? wall=$(( $(date +%s)-T2 ))s" | tee -a "$OUT/resume.txt"
timeout 40 python3 - >"$OUT/load.txt" 2>&1 <<'PY'
import os, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = "/checkpoints/hf_model"
print(sorted(os.listdir(path)))
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).cuda()
ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, return_tensors="pt").cuda()
out = model.generate(ids, max_new_tokens=12, do_sample=False)
print("params", sum(p.numel() for p in model.parameters()), "generated", repr(tok.decode(out[0, ids.shape[1]:])))
PY
echo "load rc=$?" >>"$OUT/load.txt"
python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1
echo "total wall $(( $(date +%s)-T0 ))s" | tee -a "$OUT/env.txt"
