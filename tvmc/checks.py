"""Argument checks of the Python API and the options dataclasses (CompileOptions, TuneOptions,
MeasureOptions): TypeError for a value of the wrong type, ValueError for a wrong value, each
naming the argument or field. A leaf: it imports nothing of tvmc."""

from __future__ import annotations

import math
import os

import numpy as np


def path_arg(name: str, value, optional: bool = False) -> str | None:
    """`value` (str or os.PathLike) as a str; None passes when `optional`."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def int_arg(name: str, value, low: int, high: int | None = None, optional: bool = False) -> int | None:
    """`value` (an int, not a bool) in low..high (high None: no bound) as an int; None passes when
    `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be "
                         f"{'in ' + str(low) + '..' + str(high) if high is not None else '>= ' + str(low)}, "
                         f"got {value}")
    return int(value)


def positive_number_arg(name: str, value, unit: str, optional: bool = False, zero: bool = False) -> float | None:
    """`value` (an int or float, not a bool, finite, > 0, or >= 0 with `zero`) as a float; None
    passes when `optional`. `unit` names what it counts ("seconds") in the message."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number of {unit}, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} number of {unit}, got {value!r}")
    return float(value)


def bool_arg(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def choice_arg(name: str, value, choices):
    """`value` when it is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def names_arg(name: str, value) -> tuple:
    """A str ("A,B") or an iterable of str -> tuple of names, stripped, empty ones dropped, each once."""
    if isinstance(value, str):
        value = value.split(",")
    try:
        items = [str(v).strip() for v in value]
    except TypeError:
        raise TypeError(f"{name} must be a str or a list of str, got {type(value).__name__}") from None
    return tuple(dict.fromkeys(v for v in items if v))
