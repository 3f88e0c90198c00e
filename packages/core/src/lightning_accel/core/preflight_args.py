"""The model arguments every plugin's ``lightning-accel preflight`` takes: a ``module:Class`` path and init arguments.

A plugin's pre-flight command (``PluginSpec.preflight``) parses its own command line, but the way a model is named is
the same for every device: ``package.module:Class`` (and the same for ``--datamodule``), with ``--init-args`` given as
a JSON object or as ``key=value`` pairs. The vendor packages share these helpers here, in the core, because they must
not import one another.

Example:
    >>> from lightning_accel.core.preflight_args import build_instance, parse_init_args
    >>> parse_init_args(["hidden=32", "name=net", '{"dropout": 0.1}'])
    {'hidden': 32, 'name': 'net', 'dropout': 0.1}
    >>> build_instance("fractions:Fraction", {"numerator": 1, "denominator": 3}, "target", object)
    Fraction(1, 3)
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["build_instance", "import_class", "parse_init_args"]


def parse_init_args(values: Sequence[str], option: str = "--init-args") -> dict[str, Any]:
    """Init arguments from a JSON object or ``key=value`` pairs (values read as JSON when they parse, else strings).

    Later values win over earlier ones for the same key.

    Args:
        values: Each occurrence of the option on the command line.
        option: The option's name, used in the error.

    Raises:
        ValueError: For a value that is neither, naming ``option``.
    """
    result: dict[str, Any] = {}
    for value in values:
        text = value.strip()
        if text.startswith("{"):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{option} {value!r}: not a JSON object ({exc}).") from None
            result.update(parsed)
            continue
        key, sep, raw = text.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(
                f"{option} {value!r}: not a JSON object nor key=value. Accepted: '{{\"hidden\": 32}}' or hidden=32."
            )
        try:
            result[key] = json.loads(raw)
        except json.JSONDecodeError:
            result[key] = raw
    return result


def import_class(path: str, option: str) -> Any:
    """Import ``path`` (``"package.module:Class"``, or ``"package.module:Outer.Inner"``) and return what it names.

    Args:
        path: The ``module:Class`` path.
        option: The option or argument that gave ``path``, used in the errors.

    Raises:
        ValueError: When ``path`` has no ``:``, its module cannot be imported, or the module has no such name.
    """
    module_name, sep, name = path.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{option}={path!r}: expected 'package.module:Class' (e.g. 'my_project.model:Net').")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{option}={path!r}: cannot import {module_name!r} ({exc}). Is it on PYTHONPATH?") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{option}={path!r}: module {module_name!r} has no {name!r}.")
        obj = getattr(obj, part)
    return obj


def build_instance(path: str, init_args: Mapping[str, Any], option: str, base: type) -> Any:
    """Import the class ``path`` names (see :func:`import_class`) and call it with ``init_args``.

    Args:
        path: The ``module:Class`` path.
        init_args: The keyword arguments, e.g. from :func:`parse_init_args`.
        option: The option or argument that gave ``path``, used in the errors.
        base: The class it must derive from (``LightningModule``, ``LightningDataModule``).

    Raises:
        ValueError: As :func:`import_class` does; when ``path`` names no subclass of ``base``; or when the call fails
            with a ``TypeError`` (a missing or unknown argument), with the arguments it was given.
    """
    cls = import_class(path, option)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{option}={path!r} is {cls!r}, not a subclass of {base.__name__}.")
    try:
        return cls(**init_args)
    except TypeError as exc:
        raise ValueError(f"{option}={path!r}: {cls.__name__}(**{dict(init_args)!r}) failed: {exc}") from None
