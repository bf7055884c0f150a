"""The checks the sections' ``validate`` methods share."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check", "is_real"]


def check(cond: bool, name: str, value: Any, valid: str) -> None:
    """Raise ``ValueError("<name> = <value> is invalid: <valid>")`` unless ``cond``."""
    if not cond:
        raise ValueError(f"{name} = {value!r} is invalid: {valid}")


def is_real(v: Any) -> bool:
    """A real number that is not a bool and not NaN."""
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and not math.isnan(v)
