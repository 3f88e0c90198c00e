"""Load the emulated SDK when torch is imported, as the Gaudi SDK loads itself in eager mode.

The SDK declares a ``torch.backends`` entry point (gaudi-pytorch-bridge ``habana_frameworks/autoload/__init__.py``);
torch calls every such entry point at the end of ``import torch`` (``torch._import_device_backends``, switched off
with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``). The SDK then imports ``habana_frameworks.torch`` unless autoloading is off:
``PT_HPU_AUTOLOAD=1`` forces it, ``PT_HPU_AUTOLOAD=0`` prevents it, and otherwise it happens in eager mode only
(``PT_HPU_LAZY_MODE`` unset or ``0`` since SDK 1.21). So in eager mode the SDK has loaded, and read the environment
variables it reads at load, before the first line after ``import torch`` runs.

lightning-accel-habana-emulator declares the same kind of entry point for the emulator, which does the same when
``LIGHTNING_ACCEL_EMULATE`` asks for HPUs and does nothing otherwise (on a Gaudi machine the SDK's own entry point
is the one that loads). It serves emulation only, so it ships with the emulator, not with lightning-accel-habana.

A top-level module kept to the standard library on purpose: torch runs the entry point in every ``import torch``
of the environment, so it must not import lightning-accel (which registers into Lightning) unless emulation is on.
"""

from __future__ import annotations

import os

__all__ = ["autoload_enabled", "load_emulated_sdk"]


def _emulation_requested() -> bool:
    value = os.environ.get("LIGHTNING_ACCEL_EMULATE", "").strip().lower()
    tokens = {part.strip() for part in value.split(",")}
    return "hpu" in tokens or "all" in tokens


def autoload_enabled() -> bool:
    """The SDK's rule: ``PT_HPU_AUTOLOAD`` decides when set to 0 or 1; otherwise eager mode autoloads, lazy does not."""
    forced = os.environ.get("PT_HPU_AUTOLOAD", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return os.environ.get("PT_HPU_LAZY_MODE", "0").strip() != "1"


def load_emulated_sdk() -> None:
    """The ``torch.backends`` entry point: import the emulated ``habana_frameworks.torch`` when asked for."""
    if not (_emulation_requested() and autoload_enabled()):
        return
    import _lightning_accel_sdk_aliases  # type: ignore[import-untyped]  # a top-level module of the core, no py.typed

    _lightning_accel_sdk_aliases.install()  # for interpreters started without site (python -S): no .pth ran
    import _lightning_accel_autoload  # type: ignore[import-untyped]  # the core's start-up hook, no py.typed

    try:
        # The load imports lightning-accel-core, which is no request to register (LIGHTNING_ACCEL_AUTOLOAD=0 holds).
        with _lightning_accel_autoload.sdk_load("lightning_accel.habana_emulator"):
            import habana_frameworks.torch  # noqa: F401
    except Exception as exc:  # a failing backend entry point would make `import torch` itself fail
        import warnings

        _raise_at_first_use(exc)
        warnings.warn(
            f"The emulated Habana SDK could not be loaded at `import torch` ({type(exc).__name__}: {exc}); the first "
            'use of "hpu" (an HPU tensor, torch.hpu) raises this error, and `import habana_frameworks.torch` tries '
            "the load again.",
            RuntimeWarning,
            stacklevel=2,
        )


def _raise_at_first_use(error: Exception) -> None:
    """Make torch's first use of "hpu" raise ``error``, the failed load's, instead of "No module named 'torch.hpu'".

    torch imports the module ``torch.hpu`` and calls its ``_lazy_init()`` before it makes the first "hpu" tensor, and
    users and torch's own test instantiation ask ``torch.hpu.is_available()``: a stand-in module, in ``sys.modules``
    and as the attribute ``torch.hpu``, answers ``is_available()`` with ``False`` (as the SDK's, which never raises,
    answers when its device cannot be opened) and raises the error for every other name. A later load of the emulated
    SDK (``import habana_frameworks.torch``) recognises the stand-in and registers the real module over it.
    """
    import sys
    import types

    import torch

    class _NotLoaded(types.ModuleType):
        # How the emulated SDK's load tells this stand-in from another Gaudi stack's torch.hpu.
        lightning_accel_failed_load = True

        def is_available(self) -> bool:
            return False

        def __getattr__(self, name: str) -> object:
            if name.startswith("__"):  # introspection (hasattr(module, "__path__") ...) sees a plain module
                raise AttributeError(name)
            raise error.with_traceback(None)

    if "torch.hpu" in sys.modules or hasattr(torch, "hpu"):
        return
    stand_in = _NotLoaded(
        "torch.hpu", f"The emulated Habana SDK failed to load at `import torch`: {type(error).__name__}: {error}"
    )
    sys.modules["torch.hpu"] = stand_in
    torch.hpu = stand_in  # type: ignore[attr-defined]
