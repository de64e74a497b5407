"""Start a program that ends when the process that started it ends.

``python -m rlinfra.runners.tether SIGNAL PROGRAM [ARGS...]`` asks the kernel (Linux
``prctl(PR_SET_PDEATHSIG)``) to send SIGNAL to this process when its parent dies, then replaces
itself with PROGRAM. ansible-runner starts ``ansible-playbook`` itself, so this is how an
``rlinfra`` command that is killed (SIGKILL, OOM) takes its playbook along: ansible-playbook
passes SIGTERM on to its workers, which end their process groups.

Elsewhere than Linux the program is started untethered.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def tether(signum: int) -> bool:
    """Ask for ``signum`` when the parent dies; False where the kernel offers no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m rlinfra.runners.tether SIGNAL PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    signum = signal.Signals[argv[0] if argv[0].startswith("SIG") else "SIG" + argv[0]]
    parent = os.getppid()
    tether(signum)
    if os.getppid() != parent:  # the parent died before the request took hold
        return 128 + signum
    os.execvp(argv[1], argv[1:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
