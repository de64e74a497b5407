#!/bin/bash
# Verl 0.6.0 main_ppo (PPO + critic) on one H200 through the device tool. Run from the repo root.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
T0=$(date +%s)
mkdir -p /tmp/site && tar -xJf .whl/bundle.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$PWD/driver:$PWD/.gpurun
echo "unpacked in $(( $(date +%s)-T0 ))s" | tee $OUT/env.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a $OUT/env.txt
python3 - <<'PY' 2>&1 | tee -a $OUT/env.txt
import importlib, sys
print(sys.version)
for m in ["torch","transformers","tokenizers","huggingface_hub","ray","verl","tensordict","hydra","omegaconf","datasets","pyarrow","fsspec","torchdata","accelerate","peft","pandas","numpy"]:
    try: mod=importlib.import_module(m); print(m, getattr(mod,"__version__","?"), getattr(mod,"__file__",""))
    except Exception as e: print(m, "FAILED", repr(e))
import torch; print("cuda", torch.cuda.is_available(), torch.version.cuda)
PY
W=/tmp/work; mkdir -p $W
python3 -m rlinfra_node.tiny_model --out $W/model --hidden 896 --layers 24 --vocab 4096 2>&1 | tee $OUT/prep.txt || exit 2
python3 -m rlinfra_node.dataprep --dataset gsm8k --source driver/rlinfra_node/samples/gsm8k_sample.jsonl --out $W/data 2>&1 | tee -a $OUT/prep.txt || exit 3
ls -la $W/model $W/data | tee -a $OUT/prep.txt
ARGS=(algorithm.adv_estimator=gae
 data.train_files=$W/data/train.parquet data.val_files=$W/data/test.parquet
 data.train_batch_size=16 data.max_prompt_length=256 data.max_response_length=64
 data.truncation=left data.dataloader_num_workers=0
 actor_rollout_ref.model.path=$W/model critic.model.path=$W/model
 actor_rollout_ref.model.use_remove_padding=false critic.model.use_remove_padding=false
 actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2 critic.strategy=fsdp2
 actor_rollout_ref.actor.optim.lr=1e-6 critic.optim.lr=1e-5
 actor_rollout_ref.actor.ppo_mini_batch_size=16 critic.ppo_mini_batch_size=16
 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 critic.ppo_micro_batch_size_per_gpu=4
 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4
 actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.mode=sync actor_rollout_ref.rollout.tensor_model_parallel_size=1
 trainer.device=cuda trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.logger=[console]
 trainer.save_freq=10 trainer.test_freq=-1 trainer.val_before_train=false
 trainer.default_local_dir=/tmp/ckpt trainer.project_name=rlinfra trainer.experiment_name=h200
 +ray_kwargs.ray_init.num_gpus=1 +ray_kwargs.ray_init.include_dashboard=false
 ++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=gpu_hook.setup)
T1=$(date +%s)
timeout 330 python3 -m rlinfra_node.verl_cpu.main_ppo "${ARGS[@]}" trainer.total_training_steps=20 2>&1 | tee $OUT/train.txt
echo "train rc=$? wall=$(( $(date +%s)-T1 ))s" | tee -a $OUT/train.txt
ls /tmp/ckpt | tee -a $OUT/train.txt
T2=$(date +%s)
timeout 170 python3 -m rlinfra_node.verl_cpu.main_ppo "${ARGS[@]}" trainer.total_training_steps=24 2>&1 | tee $OUT/resume.txt
echo "resume rc=$? wall=$(( $(date +%s)-T2 ))s" | tee -a $OUT/resume.txt
ls /tmp/ckpt /tmp/ckpt/global_step_24/actor 2>&1 | tee -a $OUT/resume.txt
( python3 -m verl.model_merger merge --backend fsdp --local_dir /tmp/ckpt/global_step_24/actor --target_dir /tmp/hf &&
python3 - <<'PY'
import torch, os
from transformers import AutoModelForCausalLM
print(os.listdir("/tmp/hf"))
m = AutoModelForCausalLM.from_pretrained("/tmp/hf", torch_dtype=torch.bfloat16).cuda()
out = m.generate(torch.tensor([[1,2,3,4]]).cuda(), max_new_tokens=8, do_sample=False)
print("load check ok: params", sum(p.numel() for p in m.parameters()), "generated", out.tolist())
PY
) 2>&1 | tee $OUT/merge.txt
echo "total wall $(( $(date +%s)-T0 ))s" | tee -a $OUT/merge.txt
