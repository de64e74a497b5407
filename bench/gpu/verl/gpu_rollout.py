"""The project's ("hf", "sync") rollout with its generation copy on the GPU (the CPU-mode class
keeps it in CPU memory; on CUDA the prompts arrive on cuda:0)."""

import torch

from rlinfra_node.verl_cpu.rollout import HFSyncRollout


class HFSyncRolloutCUDA(HFSyncRollout):
    def __init__(self, config, model_config, device_mesh):
        super().__init__(config, model_config, device_mesh)
        if torch.cuda.is_available():
            self.module.to(torch.cuda.current_device())
