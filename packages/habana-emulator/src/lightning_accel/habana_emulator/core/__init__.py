"""Emulation of ``habana_frameworks.torch.core`` (imported by users as ``htcore``).

The execution mode is read once, when the SDK loads, from ``PT_HPU_LAZY_MODE`` (Intel Gaudi docs, "Runtime
Environment Variables"; the default changed from lazy to eager in release 1.21: "Since Habana software >= 1.21.0,
PT_HPU_LAZY_MODE=0 is the default"):

* ``0`` or unset: eager mode. Operations run as they are issued; ``mark_step()`` does nothing (the bridge's
  ``mark_step`` is decorated ``@lazy_only``, core/step_closure.py); ``torch.compile`` with ``hpu_backend`` is the
  way to build graphs. The HPU graph APIs are exported (since SDK 1.24) but creating a graph raises a
  ``RuntimeError`` (see :mod:`.hpu`).
* ``1``: lazy mode. Operations accumulate into a graph that runs at ``mark_step()``; HPU graphs can be captured;
  ``torch.compile`` is not supported. The SDK loads in lazy mode only on Intel's torch build
  (``LIGHTNING_ACCEL_EMULATE_HPU_TORCH``, see :mod:`.._torch_build`).

Changing the variable after the SDK has loaded changes nothing, as on the SDK. The backing device executes every
operation eagerly, so here ``mark_step`` cannot change results: it records that a graph boundary was reached and,
with ``sync=True``, waits for the backing device.
"""

from __future__ import annotations

import os
import threading

from .. import _lazy_graphs, _native, _not_emulated, hpu

__all__ = ["hpu", "is_lazy", "mark_step", "step_closure"]

_LAZY_MODE_VAR = "PT_HPU_LAZY_MODE"

_lock = threading.Lock()
_marked_step_total = 0


def _mode_at_load() -> bool:
    raw = os.environ.get(_LAZY_MODE_VAR, "0").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ValueError(
        f"{_LAZY_MODE_VAR}={raw!r} is not a mode. Accepted: '0' (eager, the default since SDK 1.21) or '1' (lazy); "
        "set it before the process starts."
    )


_lazy = _mode_at_load()
hpu._export_graph_api(_lazy)


def is_lazy() -> bool:
    """Whether lazy mode is on (``PT_HPU_LAZY_MODE=1`` when the SDK loaded)."""
    return _lazy


def mark_step(device_str: str = "", sync: bool = False) -> None:
    """Mark the end of a lazy-mode graph; a no-op in eager mode, as on the SDK.

    Args:
        device_str: Accepted for signature compatibility with the SDK; ignored.
        sync: Wait until the backing device has finished the queued work.
    """
    global _marked_step_total
    if not _lazy:
        return
    with _lock:
        _marked_step_total += 1
    _lazy_graphs.end_graph()
    if sync:
        hpu.synchronize()


def _marked_steps() -> int:
    """Emulator only (not an SDK name): how many graph boundaries ``mark_step`` has recorded in this process."""
    return _marked_step_total


def _load_mode(lazy: bool) -> None:
    """Emulator only (not an SDK name): behave as an SDK loaded with ``PT_HPU_LAZY_MODE=1`` (``lazy``) or ``0``.

    A real process cannot switch modes; the test suite uses this to run mode-specific tests in one process.
    """
    global _lazy
    _lazy = lazy
    hpu._export_graph_api(lazy)
    from .. import _custom_ops, _module_names

    _module_names.install(lazy)  # a module made in lazy mode gets the SDK's name hooks, as on Gaudi
    if _native.is_installed():
        _lazy_graphs.install(lazy)

    _custom_ops.register(lazy)  # the SDK of that mode has that mode's operator schemas


from .. import _load_effects  # noqa: E402
from . import step_closure  # noqa: E402  (it reads the mode decided above)

# What the SDK's core does when it loads (core/__init__.py:46-55,140-147), in its order: wrap torch's functions,
# register torch.compile's hpu_backend (in both modes: backends.py is imported at :55), default HABANA_PROFILE.
_load_effects.overwrite_torch_functions(_lazy)
from ..dynamo.compile_backend import backends as _backends  # noqa: E402,F401

_load_effects.default_habana_profile()

_not_emulated.provide(globals(), "habana_frameworks.torch.core")
