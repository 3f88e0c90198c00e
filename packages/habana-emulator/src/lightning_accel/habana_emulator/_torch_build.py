"""Which build of torch the emulated SDK stands on: Intel's (the default) or PyPI's upstream CPU build.

The SDK at gaudi-pytorch-bridge bcc5172 (the 1.24 period) looks at the local part of ``torch.__version__`` when it
loads (``python_packages/habana_frameworks/torch/__init__.py:39-54``): ``git...`` or ``hpu...`` is Intel's own torch
build, which Intel's installer and containers ship; ``...cpu...`` is upstream's CPU build from PyPI. Lazy mode
(``PT_HPU_LAZY_MODE=1``) loads on Intel's build only: on the upstream build the load fails with an
``AssertionError`` before the SDK's library is loaded (``:52-53``), so nothing else of the load happens.

The emulator itself always runs on upstream's CPU torch (``2.13.0+cpu``), but it stands for the SDK as users run it,
so by default it plays Intel's build (lazy mode loads). ``LIGHTNING_ACCEL_EMULATE_HPU_TORCH=upstream`` plays PyPI's
build instead, with the SDK's refusal of lazy mode. The variable is read once, when the emulated SDK loads.

Not emulated: the SDK's check that the running torch has the major/minor version the SDK was compiled for
(``:47-50``); the emulator is built for the torch it runs on (docs/emulator.md).
"""

from __future__ import annotations

import os

import torch

from lightning_accel.core.errors import ConfigurationError

__all__ = ["BUILDS", "TORCH_BUILD_VAR", "load_torch_build", "refuse_lazy_mode_on_upstream", "torch_build"]

TORCH_BUILD_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_TORCH"
#: Variable value -> what it stands for (used in the error for a bad value).
BUILDS: dict[str, str] = {
    "intel": "Intel's torch build, as Intel's installer and containers ship it: lazy mode loads",
    "upstream": "PyPI's upstream CPU build of torch: the SDK refuses lazy mode when it loads",
}
_DEFAULT = "intel"
_LAZY_MODE_VAR = "PT_HPU_LAZY_MODE"

_loaded: str | None = None


def load_torch_build() -> str:
    """Read ``LIGHTNING_ACCEL_EMULATE_HPU_TORCH`` (at SDK load) and keep it for the life of the process.

    Raises:
        ConfigurationError: For a value that names no torch build.
    """
    global _loaded
    raw = os.environ.get(TORCH_BUILD_VAR, "")
    value = raw.strip().lower() or _DEFAULT
    if value not in BUILDS:
        accepted = "; ".join(f"{name!r} ({meaning})" for name, meaning in BUILDS.items())
        raise ConfigurationError(
            f"{TORCH_BUILD_VAR}={raw!r} names no torch build the emulated Habana SDK can stand on. Accepted (any "
            f"case): {accepted}. Unset it to emulate Intel's build."
        )
    _loaded = value
    return value


def torch_build() -> str:
    """The emulated torch build (``"intel"`` or ``"upstream"``), read at SDK load."""
    return _loaded if _loaded is not None else load_torch_build()


def _lazy_mode_requested() -> bool:
    # The emulated core's rule ("1" is lazy, "0" or unset eager); it refuses any other value itself, a moment later.
    # Read here because the SDK refuses before anything else of the load happens, core included.
    return os.environ.get(_LAZY_MODE_VAR, "0").strip() == "1"


def refuse_lazy_mode_on_upstream() -> None:
    """Fail the load in lazy mode when the emulated torch is upstream's build, as the SDK does (``__init__.py:52-53``).

    Raises:
        AssertionError: ``PT_HPU_LAZY_MODE=1`` with ``LIGHTNING_ACCEL_EMULATE_HPU_TORCH=upstream`` (the SDK's type).
    """
    if torch_build() != "upstream" or not _lazy_mode_requested():
        return
    raise AssertionError(
        f"Lazy mode ({_LAZY_MODE_VAR}=1) is not supported on upstream PyTorch {torch.__version__}: the Habana SDK "
        f"loads lazy mode only on Intel's PyTorch build, and this emulator plays PyPI's upstream build "
        f"({TORCH_BUILD_VAR}=upstream). Run in eager mode (unset {_LAZY_MODE_VAR} or set it to 0), or set "
        f"{TORCH_BUILD_VAR}=intel (the default) to emulate Intel's build, where lazy mode loads."
    )
