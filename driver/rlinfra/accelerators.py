"""Accelerator specs such as ``H100:8``: parsing and the names rlinfra knows."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

# GPU names as profiles spell them, with memory per GPU in GiB (for size estimates).
KNOWN_ACCELERATORS: dict[str, int] = {
    "B200": 180,
    "H200": 141,
    "H100": 80,
    "A100-80GB": 80,
    "A100": 40,
    "L40S": 48,
    "L4": 24,
    "A10G": 24,
    "V100": 16,
    "T4": 16,
}

# A device name as nvidia-smi reports it ("NVIDIA H100 80GB HBM3", "Tesla T4") -> the profile
# name; longer names first, so L40S is not read as L4. A100s with 80 GB say so in their name.
_DEVICE_NAMES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rf"(?<![A-Z0-9]){pattern}(?![A-Z0-9])"))
    for name, pattern in (
        ("B200", "B200"),
        ("H200", "H200"),
        ("H100", "H100"),
        ("A100-80GB", r"A100[ -](?:[A-Z0-9]+-)?80GB"),
        ("A100", "A100"),
        ("L40S", "L40S"),
        ("L4", "L4"),
        ("A10G", "A10G"),
        ("V100", "V100"),
        ("T4", "T4"),
    )
)

_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9-]*)(?::(?P<count>[^:]+))?$")


@dataclass(frozen=True, order=True)
class Accelerator:
    """One accelerator choice: ``count`` GPUs of ``name`` on each node."""

    name: str
    count: int

    def __str__(self) -> str:
        return f"{self.name}:{self.count}"

    @property
    def memory_gib(self) -> int:
        return KNOWN_ACCELERATORS[self.name]


def parse_accelerator(spec: str) -> Accelerator:
    """Parse ``NAME[:COUNT]``; raise ValueError with a message that says what is wrong."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise ValueError(f"cannot parse accelerator {spec!r}: expected NAME:COUNT, e.g. 'H100:8'")
    raw_name = match.group("name")
    by_upper = {name.upper(): name for name in KNOWN_ACCELERATORS}
    name = by_upper.get(raw_name.upper())
    if name is None:
        close = difflib.get_close_matches(raw_name.upper(), list(by_upper), n=1)
        suggestion = f" Did you mean {by_upper[close[0]]!r}?" if close else ""
        known = ", ".join(KNOWN_ACCELERATORS)
        raise ValueError(f"unknown accelerator {raw_name!r} (known: {known}).{suggestion}")
    raw_count = match.group("count")
    if raw_count is None:
        count = 1
    else:
        if not raw_count.isdigit():
            raise ValueError(
                f"cannot parse accelerator {spec!r}: count {raw_count!r} is not a whole number"
            )
        count = int(raw_count)
    if not 1 <= count <= 16:
        raise ValueError(f"accelerator {spec!r}: count must be between 1 and 16")
    return Accelerator(name, count)


def from_device_name(device: str) -> str | None:
    """The profile name of a GPU that nvidia-smi calls ``device``; None when rlinfra has none."""
    upper = device.upper()
    for name, pattern in _DEVICE_NAMES:
        if pattern.search(upper):
            return name
    return None
