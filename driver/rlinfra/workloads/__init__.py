"""Workloads: what a profile runs on its cluster (Verl PPO/GRPO, search-augmented GRPO, inference).

- ``model``: the profile's ``workload:`` section (strict pydantic models).
- the job spec, ``job_spec(plan) -> JobSpec`` (the exact commands, pure), is ``rlinfra.jobspec``,
  above the plan.
- ``verl_config``: the pinned Verl release's config keys, shipped as data, and the checks.
- ``memory``: a GPU memory estimate that warns before GPUs are paid for.
"""
