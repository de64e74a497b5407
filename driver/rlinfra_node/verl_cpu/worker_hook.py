"""Ray's ``worker_process_setup_hook`` for Verl's CPU mode (``SETUP_HOOK`` names it): a module of
its own, so that the dotted path Ray imports (``module.function``) is a module file and the
function in it."""

from __future__ import annotations


def setup_worker() -> None:
    """Check the Verl version and apply every patch, in each worker process Ray starts."""
    from rlinfra_node.verl_cpu.patches import apply_patches

    apply_patches()
