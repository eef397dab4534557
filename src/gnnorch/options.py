"""One validation vocabulary for every option gnnorch takes (ground floor: imports nothing of
gnnorch).

Convention, the same for `Runtime(...)`, `tune=...`, `cache=...` and every config class:
* an unknown option or setting name is a `TypeError` (as Python does for an unexpected keyword
  argument), naming the unknown keys and listing the valid ones;
* a known option with a bad value is a `ValueError` naming the option and what is allowed.

Numbers are plain Python ints / floats (never bools) unless `lenient=True`, which also takes
any `numbers.Integral` / `numbers.Real` (numpy scalars, fractions): for settings that are only
used in arithmetic, not sent to rank processes as JSON or to the standard library.
"""
from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Iterable, TypeVar

C = TypeVar("C")


def check_keys(where: str, given: Iterable[str], valid: Iterable[str],
               what: str = "option") -> None:
    """Raise `TypeError` when `given` holds names outside `valid` (`where`: e.g. "Runtime()",
    "tune", "cache"; `what`: what one name is called, e.g. "setting", "keyword argument")."""
    valid = tuple(valid)
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise TypeError(f"{where} got unexpected {what}(s) {unknown}; valid {what}s are: "
                        f"{', '.join(valid)}")


def check_int(name: str, value: Any, low: int, high: int | None = None,
              allow_none: bool = False, lenient: bool = False) -> None:
    """`value` must be an int (not a bool) in [low, high] (high None: unbounded)."""
    if allow_none and value is None:
        return
    bound = f"in {low}..{high}" if high is not None else f">= {low}"
    kind = numbers.Integral if lenient else int
    if isinstance(value, bool) or not isinstance(value, kind) or value < low or (
            high is not None and value > high):
        raise ValueError(f"{name} must be an integer {bound}"
                         f"{' or None' if allow_none else ''}, got {value!r}")


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False,
                 allow_none: bool = False, lenient: bool = False) -> None:
    """`value` must be a real number (not a bool, not NaN) in the interval given by low/high;
    `*_open` excludes the bound itself."""
    if allow_none and value is None:
        return
    kind = numbers.Real if lenient else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool) and value == value
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        if high is None and low is not None:
            span = f"{'>' if low_open else '>='} {low:g}"
        elif low is None and high is not None:
            span = f"{'<' if high_open else '<='} {high:g}"
        elif low is None:
            span = "(any finite value)"
        else:
            span = (f"in {'(' if low_open else '['}{low:g}, {high:g}"
                    f"{')' if high_open else ']'}")
        raise ValueError(f"{name} must be a number {span}"
                         f"{' or None' if allow_none else ''}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any],
                 allowed: str | None = None) -> None:
    """`value` must be one of `choices` (compared with `==`, booleans and None by identity);
    `allowed` words the choices in the message (default: their reprs)."""
    choices = tuple(choices)
    for choice in choices:
        if isinstance(choice, bool) or isinstance(value, bool) or choice is None:
            if value is choice:
                return
        elif value == choice:
            return
    allowed = allowed or f"one of {', '.join(map(repr, choices))}"
    raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """`value` must be True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_path(name: str, value: Any, allow_none: bool = True) -> None:
    """`value` must be a path (str or os.PathLike), or None when allowed."""
    if allow_none and value is None:
        return
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a folder path{' or None' if allow_none else ''}, "
                         f"got {value!r}")


def config_option(option: str, value: Any, cls: type[C], *, default: tuple = (None,),
                  off: tuple = (), accepts: str = "None") -> C | None:
    """The configuration the keyword `option` asks for, `cls` being a config dataclass:
    `value` itself when it is a `cls`; a `cls` of a dict of its fields (`TypeError` naming an
    unknown one, `check_keys`); ``cls()`` for a value in `default` and None for a value in
    `off` (both compared by identity: True, False, None); anything else is a `ValueError` that
    says what the keyword takes (`accepts`, e.g. "True, False")."""
    if any(value is v for v in off):
        return None
    if any(value is v for v in default):
        return cls()
    if isinstance(value, cls):
        return value
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if isinstance(value, dict):
        check_keys(option, value, fields, what="setting")
        return cls(**value)
    raise ValueError(f"{option} must be {accepts}, a gnnorch.{cls.__name__} or a dict of its "
                     f"fields ({', '.join(fields)}), got {value!r}")
