"""The base of every profile model: unknown keys refused, values frozen, no booleans as numbers.

YAML reads ``true`` as a boolean and pydantic would take it as the number 1 (``num_nodes: true``
is one node); a field that holds a number refuses a boolean instead.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def _numeric(annotation: Any) -> bool:
    """An int or float field (optional or not), not one that also takes a boolean."""
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(a in (int, float) for a in args)
    return False


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key, value in data.items():
                info = cls.model_fields.get(key) if isinstance(key, str) else None
                if info is not None and isinstance(value, bool) and _numeric(info.annotation):
                    raise ValueError(f"{key}: expected a number, got {str(value).lower()}")
        return data
