"""Workloads: what a profile runs on its cluster (Verl PPO/GRPO, search-augmented GRPO, inference).

- ``model``: the profile's ``workload:`` section (strict pydantic models).
- ``spec``: ``job_spec(plan) -> JobSpec``, the exact commands, pure.
- ``verl_config``: the pinned Verl release's config keys, shipped as data, and the checks.
- ``memory``: a GPU memory estimate that warns before GPUs are paid for.
"""

from __future__ import annotations

from rlinfra.workloads.model import Workload
from rlinfra.workloads.spec import JobSpec, Step, job_spec

__all__ = ["JobSpec", "Step", "Workload", "job_spec"]
