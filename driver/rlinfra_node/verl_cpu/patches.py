"""The CPU-mode patches to Verl 0.6.0, applied in the running process (see the package docstring
for what each addresses). ``apply_patches`` is idempotent and runs in the launcher's process and,
through Ray's ``worker_process_setup_hook``, in the TaskRunner and every worker.

Patches replace module attributes. A Verl module that imported a patched function by name before
the patch holds the original, so each replacement is also made in every loaded ``verl`` module
that holds it (the hook runs before a worker unpickles its actor class, so usually there is none).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlinfra_node.spot_watch import NOTICE_DIR_ENV, Notice, due_notice, read_notices
from rlinfra_node.verl_cpu import check_verl_version, installed_verl_version

ROLLOUT_KEY = ("hf", "sync")
ROLLOUT_CLASS = "rlinfra_node.verl_cpu.rollout.HFSyncRollout"
_applied = False


def _replace_everywhere(module: Any, name: str, replacement: Callable[..., Any]) -> None:
    """Set ``module.name`` and every loaded verl module's reference to the same original."""
    original = getattr(module, name)
    setattr(module, name, replacement)
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("verl.") and getattr(mod, name, None) is original:
            setattr(mod, name, replacement)


def _announce_rank() -> None:
    """One line per worker rank, naming the node it runs on: where Verl placed its workers shows
    in the job's log."""
    try:
        import ray

        where = ray.util.get_node_ip_address()
    except Exception:  # outside Ray (a unit test): no node to name
        where = "this host"
    rank, size = dist.get_rank(), dist.get_world_size()
    print(f"verl_cpu: rank {rank} of {size} joined over gloo on node {where}", flush=True)


def _patch_backend() -> None:
    """gloo where Verl asks for an NCCL-like backend on a CPU-only node."""
    import verl.utils.device as device

    if device.is_cuda_available or device.is_npu_available:
        return
    _replace_everywhere(device, "get_nccl_backend", lambda: "gloo")

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            backends = {part.split(":")[-1] for part in backend.split(",")}
            if backends == {"gloo"}:
                kwargs["backend"] = "gloo"
        result = original(*args, **kwargs)
        _announce_rank()
        return result

    dist.init_process_group = init_process_group


def _flash_attn_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def _patch_attention() -> None:
    """sdpa wherever a model is asked for flash_attention_2, unless flash_attn is installed (a
    GPU node with it keeps Verl's choice)."""
    from transformers import PreTrainedModel

    if _flash_attn_installed():
        return
    original = PreTrainedModel._check_and_adjust_attn_implementation

    @functools.wraps(original)
    def check_and_adjust(self: Any, attn_implementation: str | None, *args: Any, **kwargs: Any):
        if attn_implementation is not None and attn_implementation.startswith("flash_attention"):
            attn_implementation = "sdpa"
        return original(self, attn_implementation, *args, **kwargs)

    PreTrainedModel._check_and_adjust_attn_implementation = check_and_adjust


def attend_somewhere(mask: Any) -> Any:
    """A boolean attention mask (True: attend) whose fully masked query rows attend to every key
    instead. Those rows are left-padding positions: their outputs never reach a loss, but a row
    with nothing to attend to makes cuDNN's attention kernel (torch's pick for sdpa on H100/H200)
    return NaN gradients, and ``0 * NaN`` carries them into every weight (bench/gpu/verl). The
    memory-efficient and math kernels stay finite. transformers did this for torch < 2.5 only."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return mask
    return mask | ~mask.any(dim=-1, keepdim=True)


def _patch_sdpa_mask() -> None:
    """Verl's padded forward (``use_remove_padding=false``) left-pads every prompt to
    ``data.max_prompt_length``, so with ``sdpa`` the padding rows attend to nothing. On an H200
    and an H100 (torch 2.11, CUDA 13) the forward was finite but every actor and critic gradient
    norm was NaN, so no optimizer step was taken: the sdpa mask is given ``attend_somewhere``."""
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:  # a transformers without mask interfaces builds its masks elsewhere
        return
    original = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    if getattr(original, "_rlinfra_attend_somewhere", False):
        return

    @functools.wraps(original)
    def sdpa_mask(*args: Any, **kwargs: Any) -> Any:
        return attend_somewhere(original(*args, **kwargs))

    sdpa_mask._rlinfra_attend_somewhere = True  # type: ignore[attr-defined]
    AttentionMaskInterface.register("sdpa", sdpa_mask)


def _patch_event_loop() -> None:
    """``workers/fsdp_workers.py:633`` calls ``asyncio.get_event_loop()`` in a worker thread that
    has no loop; under an event loop policy that refuses to make one (uvloop's, installed on
    some GPU images) it raises "There is no current event loop": make and set one instead, as
    Verl does itself at ``:911``."""
    import asyncio

    original = asyncio.get_event_loop
    if getattr(original, "_rlinfra_makes_loop", False):
        return

    @functools.wraps(original)
    def get_event_loop() -> asyncio.AbstractEventLoop:
        try:
            return original()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            return loop

    get_event_loop._rlinfra_makes_loop = True  # type: ignore[attr-defined]
    asyncio.get_event_loop = get_event_loop


def _total_and_free_memory() -> tuple[int, int]:
    """(free, total) bytes of this machine's memory, as ``torch.cuda.mem_get_info`` answers."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def _patch_torch_cpu() -> None:
    """The ``torch.cuda`` functions Verl calls on ``get_torch_device()``, for ``torch.cpu``."""
    shims: dict[str, Callable[..., Any]] = {
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda new_state, device=None: torch.set_rng_state(new_state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
        # No caching allocator and no per-device statistics on CPU.
        "empty_cache": lambda: None,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
        "mem_get_info": lambda device=None: _total_and_free_memory(),
        "get_device_name": lambda device=None: "cpu",
    }
    for name, shim in shims.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, shim)


def _patch_rollout() -> None:
    """Register the ("hf", "sync") rollout Verl 0.6.0 lacks."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[ROLLOUT_KEY] = ROLLOUT_CLASS


def reduce_timing(
    timing_raw: dict[str, float], reduce_op: Any = dist.ReduceOp.AVG
) -> dict[str, float]:
    """Verl's ``reduce_timing`` for gloo: AVG as a SUM divided by the world size."""
    if not dist.is_initialized():
        return timing_raw
    keys = sorted(timing_raw)
    values = torch.tensor([timing_raw[key] for key in keys], dtype=torch.float32)
    average = reduce_op == dist.ReduceOp.AVG
    dist.all_reduce(values, op=dist.ReduceOp.SUM if average else reduce_op)
    if average:
        values /= dist.get_world_size()
    return dict(zip(keys, values.tolist(), strict=True))


def topk_reduce_ratio_min_max(timing: float, k: int = 10) -> tuple[float, float, float]:
    """Verl's ``topk_reduce_ratio_min_max`` with same-shaped (1-element) tensors for gloo."""
    if not dist.is_initialized():
        return -1.0, -1.0, -1.0
    mine = torch.tensor([timing], dtype=torch.float32)
    gathered = [torch.zeros(1, dtype=torch.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    stack = torch.cat(gathered)
    threshold = torch.quantile(stack, 1 - k / 100)
    tail_ratio = (stack > threshold).float().mean().item()
    return tail_ratio, stack.min().item(), stack.max().item()


def _patch_timing() -> None:
    import verl.utils.profiler.performance as performance

    _replace_everywhere(performance, "reduce_timing", reduce_timing)
    _replace_everywhere(performance, "topk_reduce_ratio_min_max", topk_reduce_ratio_min_max)


def notice_forcing_save(
    max_steps_duration: float, save_ckpt_duration: float, redundant_time: float
) -> Notice | None:
    """The preemption notice (``rlinfra_node.spot_watch``) in ``$RLINFRA_NOTICE_DIR`` whose node
    goes before one more step and a save would be done, or None (no folder, no such notice)."""
    folder = os.environ.get(NOTICE_DIR_ENV)
    if not folder:
        return None
    window = save_ckpt_duration + max_steps_duration + redundant_time
    try:
        return due_notice(read_notices(Path(folder)), window, time.time())
    except OSError:  # the bucket's mount may blink; the next step looks again
        return None


def _patch_preemption_notices() -> None:
    """``utils/checkpoint/checkpoint_manager.py:207`` ``should_save_ckpt_esi``, called by the
    trainer after every step (``trainer/ppo/ray_trainer.py:1210``, imported by name at ``:55``),
    reads an expiration time from environment variables only, fixed when the trainer starts: it
    also answers True when a spot node's preemption notice is due, and says whose. Verl then
    saves a checkpoint (when ``trainer.save_freq`` > 0) and prints "Force saving checkpoint"."""
    import verl.utils.checkpoint.checkpoint_manager as checkpoint_manager

    original = checkpoint_manager.should_save_ckpt_esi
    if getattr(original, "_rlinfra_notices", False):
        return

    @functools.wraps(original)
    def should_save_ckpt_esi(
        max_steps_duration: float, save_ckpt_duration: float = 60, redundant_time: float = 0
    ) -> bool:
        if original(max_steps_duration, save_ckpt_duration, redundant_time):
            return True
        notice = notice_forcing_save(max_steps_duration, save_ckpt_duration, redundant_time)
        if notice is None:
            return False
        left = notice.deadline - time.time()
        print(
            f"verl_cpu: preemption notice of node {notice.node} ({notice.provider} "
            f"{notice.action} in {left:.0f} s): forcing a checkpoint save",
            flush=True,
        )
        return True

    should_save_ckpt_esi._rlinfra_notices = True  # type: ignore[attr-defined]
    _replace_everywhere(checkpoint_manager, "should_save_ckpt_esi", should_save_ckpt_esi)


PATCHES: tuple[Callable[[], None], ...] = (
    _patch_torch_cpu,
    _patch_backend,
    _patch_attention,
    _patch_sdpa_mask,
    _patch_event_loop,
    _patch_rollout,
    _patch_timing,
    _patch_preemption_notices,
)


def apply_patches() -> None:
    """Check that Verl is 0.6.0, then apply every patch once in this process."""
    global _applied
    if _applied:
        return
    check_verl_version(installed_verl_version())
    for patch in PATCHES:
        patch()
    _applied = True
