"""Run Verl 0.6.0's ``main_ppo`` in CPU mode: ``python -m rlinfra_node.verl_cpu.main_ppo [overrides]``.

The overrides are Hydra's, as for ``python -m verl.trainer.main_ppo``; give the CPU ones too (the
function ``cpu_overrides`` of ``rlinfra_node.verl_cpu``). This process applies the patches itself,
then adds ``++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=<SETUP_HOOK>``: Verl's
``run_ppo`` passes that runtime env to ``ray.init`` (merged by Ray with a submitted job's own), so
the TaskRunner and every worker process import the hook and patch themselves before they load
Verl's worker classes. Workers must be able to import ``rlinfra_node``: a job's ``working_dir``, or
the ``PYTHONPATH`` a local Ray inherits from this process. ``RLINFRA_NOTICE_DIR`` (where spot
nodes' preemption notices are) reaches the workers the same way (``notice_override``).

Exit codes: Verl's; 2 when the installed Verl is not the supported release.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from rlinfra_node.spot_watch import NOTICE_DIR_ENV
from rlinfra_node.verl_cpu import SETUP_HOOK, UnsupportedVerl

HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
# Set by Ray in a submitted job's entrypoint: the job's config, runtime env included.
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def hook_override(argv: Sequence[str], environ: dict[str, str]) -> list[str]:
    """The override that hands Ray the setup hook, unless the job or the command line has one."""
    job = json.loads(environ.get(RAY_JOB_CONFIG_ENV, "{}") or "{}")
    if (job.get("runtime_env") or {}).get("worker_process_setup_hook"):
        return []
    if any(arg.lstrip("+").startswith(f"{HOOK_KEY}=") for arg in argv):
        return []
    return [f"++{HOOK_KEY}={SETUP_HOOK}"]


NOTICE_KEY = "ray_kwargs.ray_init.runtime_env.env_vars." + NOTICE_DIR_ENV


def notice_override(argv: Sequence[str], environ: dict[str, str]) -> list[str]:
    """``$RLINFRA_NOTICE_DIR`` of this process, for the TaskRunner (whose preemption-notice patch
    reads it), unless a submitted job's runtime env or the command line gives it already: a
    Ray worker gets the environment of its job, not of the driver that started it."""
    folder = environ.get(NOTICE_DIR_ENV)
    if not folder:
        return []
    job = json.loads(environ.get(RAY_JOB_CONFIG_ENV, "{}") or "{}")
    if NOTICE_DIR_ENV in ((job.get("runtime_env") or {}).get("env_vars") or {}):
        return []
    if any(arg.lstrip("+").startswith(f"{NOTICE_KEY}=") for arg in argv):
        return []
    return [f"++{NOTICE_KEY}={folder}"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from rlinfra_node.verl_cpu.patches import apply_patches

        apply_patches()
    except UnsupportedVerl as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    from verl.trainer import main_ppo

    from rlinfra_node.verl_cpu import SETUP_HOOK, SUPPORTED_VERL

    print(
        f"verl_cpu: Verl {SUPPORTED_VERL} in CPU mode: patched here; Ray workers patch "
        f"themselves through {SETUP_HOOK}",
        flush=True,
    )
    environ = dict(os.environ)
    sys.argv = [
        sys.argv[0],
        *args,
        *hook_override(args, environ),
        *notice_override(args, environ),
    ]
    main_ppo.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
