#!/bin/bash
# Verl 0.6.0 main_ppo (PPO + critic) through the project's own job path: a Ray head started as
# the node roles start it, then rlinfra_node.job_runner executing the job spec that
# `rlinfra render` made from bench/gpu/verl/gpu-ppo-hf.yaml.
#   bash bench/gpu/verl/run.sh gpu   one GPU: model and data steps, 20 steps, checkpoint, merge;
#                                    the merged model's load check; the resume to step 24 and
#                                    its merge; the load check again
#                                    (RESUME=0: without the resume and its load check)
#   bash bench/gpu/verl/run.sh cpu   the same config in CPU mode (GPU hidden, FSDP2 over gloo,
#                                    one worker), 2 steps, no checkpoint: the step time for scale
# Carried: .gpurun/ (job.json, job-resume.json, job-cpu.json from prepare.sh) and
# .whl/bundle.tar.xz. Everything it reports lands in $OUT.
set -o pipefail
MODE=${1:-gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
export PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s)
mkdir -p /tmp/site && tar -xJf .whl/bundle.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$ROOT/driver
{
  echo "mode $MODE; unpacked in $(( $(date +%s)-T0 ))s"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nproc; free -g | head -2
  python3 -c 'import sys,torch,transformers,ray,verl; print(sys.version.split()[0], "torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__, "ray", ray.__version__, "verl", verl.__version__)'
} 2>&1 | tee "$OUT/env.txt"
cd "$ROOT/driver" || exit 1
if [ "$MODE" = cpu ]; then
  # CPU mode's node resources, as the roles start Ray on a CPU node (verl_cpu.ray_start_args).
  # "-1": no device for CUDA, yet one entry for `ray start --num-gpus 1` (an empty list is refused).
  export CUDA_VISIBLE_DEVICES=-1
  mapfile -t ARGS < <(python3 -c 'from rlinfra_node.verl_cpu import ray_start_args; print("\n".join(ray_start_args(1)))')
  python3 -m ray.scripts.scripts start --head "${ARGS[@]}" --include-dashboard=false \
    --disable-usage-stats 2>&1 | tail -2 | tee -a "$OUT/env.txt"
  T1=$(date +%s)
  timeout 520 python3 -m rlinfra_node.job_runner --spec "$ROOT/.gpurun/job-cpu.json" >"$OUT/cpu.txt" 2>&1
  echo "cpu job rc=$? wall=$(( $(date +%s)-T1 ))s" | tee -a "$OUT/cpu.txt"
else
  # GPU memory, sampled each second for the whole run (peak in summarise.py).
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -l 1 >"$OUT/gpu_mem.csv" 2>/dev/null &
  python3 -m ray.scripts.scripts start --head --num-gpus 1 --include-dashboard=false \
    --disable-usage-stats 2>&1 | tail -2 | tee -a "$OUT/env.txt"
  T1=$(date +%s)
  timeout 320 python3 -m rlinfra_node.job_runner --spec "$ROOT/.gpurun/job.json" >"$OUT/job.txt" 2>&1
  echo "job rc=$? wall=$(( $(date +%s)-T1 ))s" | tee -a "$OUT/job.txt"
  ls /checkpoints /checkpoints/global_step_20 /checkpoints/hf_model 2>&1 | tee -a "$OUT/job.txt"
  timeout 60 python3 "$ROOT/bench/gpu/verl/load_check.py" /checkpoints/hf_model \
    /checkpoints/models/qwen2.5-0.5b-shapes >"$OUT/load.txt" 2>&1
  echo "load rc=$?" >>"$OUT/load.txt"
fi
if [ "$MODE" != cpu ] && [ "${RESUME:-1}" = 1 ]; then
  T2=$(date +%s)
  timeout 190 python3 -m rlinfra_node.job_runner --spec "$ROOT/.gpurun/job-resume.json" >"$OUT/resume.txt" 2>&1
  echo "resume rc=$? wall=$(( $(date +%s)-T2 ))s" | tee -a "$OUT/resume.txt"
  timeout 60 python3 "$ROOT/bench/gpu/verl/load_check.py" /checkpoints/hf_model \
    /checkpoints/models/qwen2.5-0.5b-shapes >"$OUT/load-resume.txt" 2>&1
  echo "load rc=$?" >>"$OUT/load-resume.txt"
fi
python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1
echo "total wall $(( $(date +%s)-T0 ))s" | tee -a "$OUT/env.txt"
