"""CPU mode for Verl 0.6.0: its real trainer (``verl.trainer.main_ppo``) on nodes without a GPU,
the HF rollout (``actor_rollout_ref.rollout.name=hf``) on nodes with one, and checkpoints saved
on a spot node's preemption notice.

Supports exactly ``verl==0.6.0`` (``SUPPORTED_VERL``); any other installed version is refused
with a one-line error naming the version found, because every patch below addresses a line of
that release (0.7 and later have no HF rollout at all).

    python -m rlinfra_node.verl_cpu.main_ppo [hydra overrides...]

applies the patches in its own process, adds ``worker_process_setup_hook`` (``SETUP_HOOK``) to
the runtime env Verl's ``run_ppo`` passes to ``ray.init`` (Ray merges it into a submitted job's
runtime env), so the TaskRunner and every worker patch themselves at start, then runs Verl's own
``main``. Nothing in Verl's installed files is edited. The overrides CPU mode needs are plain
data here (``cpu_overrides``), so the driver can render them into the job and show them in
``plan``.

The patches (``rlinfra_node.verl_cpu.patches``), one line each, with the Verl 0.6.0 line each
addresses:

- gloo: ``utils/device.py:86`` raises "No available nccl backend found on device type cpu"
  (reached from ``workers/fsdp_workers.py:149``): it answers ``gloo``, and the backend string
  ``cpu:gloo,cpu:gloo`` this makes (torch refuses the repeated device) becomes ``gloo``.
- attention: ``flash_attention_2`` is hard-coded at ``workers/fsdp_workers.py:319, 1236, 1637``
  and ``utils/model.py:638`` (flash_attn is not installed on CPU): transformers'
  ``PreTrainedModel._check_and_adjust_attn_implementation`` turns it into ``sdpa``, one point
  for actor, ref and critic alike (left alone where flash_attn is installed).
- sdpa mask: with ``use_remove_padding=false`` every prompt is left-padded to the maximum, and
  the padding rows attend to nothing; on CUDA that made every gradient NaN (seen on an H200).
  Those rows attend to every key instead (their outputs reach no loss).
- event loop: ``workers/fsdp_workers.py:633`` calls ``asyncio.get_event_loop()`` where no loop
  is set; under uvloop's policy that raises: one is made, as Verl does at ``:911``.
- torch.cpu: ``workers/fsdp_workers.py:597`` and others call ``get_torch_device()`` (``torch.cpu``
  here) for ``get_rng_state``, ``set_rng_state``, ``manual_seed``, ``empty_cache`` and memory
  statistics, which ``torch.cpu`` lacks: the missing ones are supplied (RNG from ``torch``,
  cache and memory functions as no-ops / zeros; real free and total memory from the OS).
- HF rollout: ``workers/rollout/base.py:80,98`` registers no ``("hf", "sync")`` rollout, and
  ``workers/rollout/hf_rollout.py:41`` cannot be built (``super().__init__()`` without its 3
  arguments, no ``resume``/``update_weights``/``release``): ``rlinfra_node.verl_cpu.rollout``
  registers one that keeps an HF copy of the policy, refreshed from the FSDP actor through
  ``update_weights``, and generates with Verl's HF loop, on the worker's device (the GPU in the
  rollout's ``dtype`` where there is one).
- timing: ``utils/profiler/performance.py:220`` all-reduces with ``ReduceOp.AVG`` and ``:234``
  all-gathers a 0-d tensor into 1-element ones; gloo has no AVG and refuses the sizes
  ("ProcessGroupGloo::allgather: invalid tensor size"): gloo-safe versions replace both.
- preemption notices: ``utils/checkpoint/checkpoint_manager.py:207`` ``should_save_ckpt_esi``
  (called after every step, ``trainer/ppo/ray_trainer.py:1210``) reads expiration times from
  environment variables fixed at start: it also answers True when a spot node's notice in
  ``$RLINFRA_NOTICE_DIR`` (``rlinfra_node.spot_watch``) is due within the save time, the longest
  step and ``trainer.esi_redundant_time``, and prints whose notice forced the save. rlinfra runs
  spot profiles' Verl jobs through this launcher for it.

What nodes need (``RAY_NODE_RESOURCES``, per worker process): Ray must count one GPU slot per
worker (``ray_trainer.py:117`` checks available GPUs against ``n_gpus_per_node * nnodes``) and
one custom ``cpu`` resource (with ``trainer.device=cpu`` the worker bundles ask for ``{"cpu": 1}``,
``single_controller/ray/base.py:122-124``, else the run hangs). Start each node with
``ray start ... --num-gpus N --resources '{"cpu": N}'`` (``ray_start_args``). ``ray.init`` cannot
add resources when it joins a running cluster; a local Ray started by Verl itself gets them from
``local_ray_overrides``. Across hosts gloo also needs ``GLOO_SOCKET_IFNAME`` in the raylet's
environment when the hostname resolves to loopback, and the checkpoint folder must be shared.
"""

from __future__ import annotations

import json

SUPPORTED_VERL = "0.6.0"

# What Ray must see on a node for each Verl worker process it runs in CPU mode.
RAY_NODE_RESOURCES: dict[str, float] = {"GPU": 1.0, "cpu": 1.0}

# The dotted path Ray imports in each worker process (runtime_env worker_process_setup_hook).
SETUP_HOOK = "rlinfra_node.verl_cpu.worker_hook.setup_worker"


class UnsupportedVerl(RuntimeError):
    """The installed Verl is not the release these patches address."""


def check_verl_version(found: str | None) -> None:
    """Refuse anything but Verl ``SUPPORTED_VERL`` (``found``: the installed version, None if
    Verl is not installed)."""
    if found != SUPPORTED_VERL:
        what = f"verl {found}" if found else "no verl"
        raise UnsupportedVerl(
            f"rlinfra's Verl CPU mode supports verl=={SUPPORTED_VERL} only; found {what}"
        )


def installed_verl_version() -> str | None:
    """The version of the ``verl`` distribution installed in this interpreter, or None."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def cpu_overrides(n_workers_per_node: int, nnodes: int = 1) -> list[str]:
    """The Hydra overrides Verl 0.6.0's ``main_ppo`` needs to train on CPU nodes.

    ``n_workers_per_node`` worker processes on each of ``nnodes`` nodes (each one holds one of
    the node's ``RAY_NODE_RESOURCES``). Keys with ``+`` are additions Verl's config lacks.
    """
    if n_workers_per_node < 1 or nnodes < 1:
        raise ValueError("n_workers_per_node and nnodes must be at least 1")
    return [
        # The device the workers and their bundles ask Ray for (a custom `cpu` resource).
        "trainer.device=cpu",
        f"trainer.n_gpus_per_node={n_workers_per_node}",
        f"trainer.nnodes={nnodes}",
        # The HF rollout this package registers; neither vLLM nor SGLang runs on CPU.
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=sync",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        # FSDP1 refuses CPU parameters with sync_module_states (fsdp_workers.py:475).
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "critic.strategy=fsdp2",
        # Remove-padding imports flash_attn.
        "actor_rollout_ref.model.use_remove_padding=false",
        "critic.model.use_remove_padding=false",
        "data.dataloader_num_workers=0",
        "trainer.logger=[console]",
        "ray_kwargs.ray_init.num_cpus=null",
    ]


def local_ray_overrides(n_workers: int) -> list[str]:
    """Overrides for a run whose ``ray.init`` starts a local Ray (no cluster to join): the node
    resources ``ray start`` would otherwise give, and no dashboard."""
    return [
        f"+ray_kwargs.ray_init.num_gpus={n_workers}",
        f"+ray_kwargs.ray_init.resources.cpu={n_workers}",
        "+ray_kwargs.ray_init.include_dashboard=false",
    ]


def ray_start_args(n_workers_per_node: int) -> list[str]:
    """``ray start`` arguments that give a node ``RAY_NODE_RESOURCES`` for that many workers."""
    gpus = int(RAY_NODE_RESOURCES["GPU"] * n_workers_per_node)
    custom = {"cpu": int(RAY_NODE_RESOURCES["cpu"] * n_workers_per_node)}
    return ["--num-gpus", str(gpus), "--resources", json.dumps(custom)]


__all__ = [
    "RAY_NODE_RESOURCES",
    "SETUP_HOOK",
    "SUPPORTED_VERL",
    "UnsupportedVerl",
    "check_verl_version",
    "cpu_overrides",
    "installed_verl_version",
    "local_ray_overrides",
    "ray_start_args",
]
