"""Ray worker setup hook for the GPU run: the project's verl_cpu hook, then asyncio.get_event_loop
that makes a loop where none is set (the device's uvloop policy raises instead; Verl 0.6.0's
fsdp_workers._build_rollout calls asyncio.get_event_loop() in the worker's main thread)."""

import asyncio
import functools

_orig = asyncio.get_event_loop


@functools.wraps(_orig)
def _get_event_loop():
    try:
        return _orig()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


def setup():
    from rlinfra_node.verl_cpu import setup_worker

    setup_worker()
    asyncio.get_event_loop = _get_event_loop
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[("hf", "sync")] = "gpu_rollout.HFSyncRolloutCUDA"
