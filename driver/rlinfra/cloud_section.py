"""A cloud's own part of a profile: a top-level key that only that cloud reads.

Each cloud that needs one declares it in its folder (``clouds/<name>/section.py``, a
:class:`CloudSection` named ``SECTION``) and the cloud registry (``rlinfra.clouds``) lists it; the
profile model is then made of its common fields and these keys (``rlinfra.profile``). So a cloud
adds its keys without touching the profile: ``ssh:`` (the ssh cloud's hosts) and ``project:``
(the GCP project) are two such sections.

A section sits below the profile: it may use the models' base (``rlinfra.strict``) and the
lowest modules, never the profile, plans or clouds (the import contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CloudSection:
    """One cloud's top-level profile key, its value's type, and what the profile asks of it.

    The hooks are optional; ``data`` is the profile's YAML mapping (before validation), and
    ``profile`` the validated one (typed ``Any`` here: a section sits below the profile model).
    """

    # The top-level key and the cloud whose profiles may set it.
    key: str
    cloud: str
    # The value's type (a pydantic model, or an annotated scalar).
    annotation: Any
    description: str
    # The key the section follows in the profile's dumps (None: at the end), so rendered copies
    # keep the order they had.
    after: str | None = None
    # The message when a profile of ``cloud`` leaves the key out; None: the key is optional.
    missing: str | None = None
    # On loading a file: the profile's data with the files the section names read in
    # (``data``, the file's path, the source to name in errors).
    expand: Callable[[dict[str, Any], Path, str], dict[str, Any]] | None = None
    # Before validation: the data with defaults the section gives other fields.
    defaults: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # After validation: refuse (ValueError) combinations of the value and the profile.
    check: Callable[[Any, Any], None] | None = None
    # `--gpus` was given: the data with the section told (it then detects nothing); returns what
    # the section said of the GPUs before (e.g. "detect"), None when it said nothing.
    gpus_given: Callable[[dict[str, Any]], str | None] | None = None
