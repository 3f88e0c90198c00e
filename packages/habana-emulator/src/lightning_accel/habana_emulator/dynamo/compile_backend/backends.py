"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend.backends``: the ``hpu_backend`` of ``torch.compile``.

The contract (gaudi-pytorch-bridge v1.18/v1.19, ``.../compile_backend/backends.py``):

* ``hpu_backend`` is the only backend the SDK registers, with ``@register_backend`` when this module is imported
  (so importing it twice into one registry would be a duplicate, as on the SDK). The AOT-autograd names of earlier
  SDKs (``aot_hpu_training_backend``, ``aot_hpu_inference_backend``) are not registered any more.
* It serves training and inference graphs (AOT autograd with a forward, backward and inference compiler).
* ``options`` are settings of the backend's ``config`` module (emulated in :mod:`.config`), applied for the one
  compilation; an unknown key fails it.
* ``torch.compile`` is supported in eager mode only (``PT_HPU_LAZY_MODE=0``, the default since 1.21; the bridge's
  own tests skip compilation in lazy mode). What the SDK does in lazy mode is not documented; the emulator refuses
  with a ``RuntimeError`` that says how to switch modes, rather than guess.

On the emulator the captured graphs are compiled by TorchInductor on the ``"hpu"`` tensors themselves: the emulated
HPU's memory is host memory, so Inductor's C++ code generator for the CPU is registered for device ``"hpu"``
while ``hpu_backend`` compiles a graph (``.._inductor``; torch's default backend still fails on HPU tensors, as on
Gaudi) and its kernels run on the HPU tensors' memory. Factories (``torch.arange(n, device=x.device)``)
and ``scaled_dot_product_attention`` inside compiled code compile. A real compilation, with Inductor's numerics
rather than Gaudi's graph compiler's.

Compiled code cannot run inside an HPU graph capture and an HPU graph cannot be built inside compiled code, as on
Gaudi: both raise a ``RuntimeError`` that says to choose one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.backends.registry import register_backend

from ... import _inductor, _not_emulated
from ...core import _LAZY_MODE_VAR
from ...core import is_lazy as _is_lazy
from ...hpu import graphs as _graphs
from ...hpu.metrics import metrics as _metrics
from . import config as hpu_backend_config

__all__ = ["hpu_backend", "hpu_backend_config"]


def _refuse_during_capture() -> None:
    if _graphs.is_current_stream_capturing():
        raise RuntimeError(
            "A torch.compile-d function ran inside an HPU graph capture. HPU graphs cannot be combined with "
            "torch.compile (the SDK does not support it): capture an uncompiled model, or compile without HPU graphs."
        )


def _refuse_lazy_mode() -> None:
    if _is_lazy():
        raise RuntimeError(
            f"torch.compile with backend='hpu_backend' needs eager mode, but {_LAZY_MODE_VAR}=1 (lazy mode) was set "
            f"when the SDK loaded. Unset {_LAZY_MODE_VAR} or set it to 0 before the process starts (eager is the "
            "default since SDK 1.21), or run the model uncompiled in lazy mode."
        )


def _elapsed_us(started_ns: int) -> int:
    return (time.perf_counter_ns() - started_ns) // 1000


@register_backend
def hpu_backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    """The HPU backend for training and inference graphs (on the emulator: Inductor on the backing device).

    ``options`` (``torch.compile(..., options={...})``) are settings of :mod:`.config` for this compilation, applied
    with ``config.patch(options)`` as the SDK does (``backends.py:52-70``): a key that is not a setting raises
    ``AttributeError``.
    """
    from torch._inductor.compile_fx import compile_fx

    _refuse_lazy_mode()
    _refuse_during_capture()
    started = time.perf_counter_ns()
    # The settings tune Gaudi's graph compiler; Inductor compiles here, so they are checked and set, not used.
    with hpu_backend_config.patch(kwargs.get("options")):  # type: ignore[attr-defined]  # a torch config module
        compiled: Callable[..., Any] = compile_fx(  # type: ignore[assignment]
            graph_module, example_inputs, inner_compile=_inductor.inner_compile, config_patches=_inductor.CONFIG_PATCHES
        )
    # Metrics hook: each graph the SDK's backend compiles is a Synapse graph compilation that emits GRAPH_COMPILE
    # (backend/synapse_helpers/graph.cpp:612-620, duration in microseconds); here Inductor's compilation is that work.
    _metrics._record_graph_compilation(f"hpu_backend_graph_{id(graph_module):x}", _elapsed_us(started))

    def run(*args: Any) -> Any:
        # Compiled kernels bypass the operator recording of a capture: replaying would silently skip them.
        _refuse_during_capture()
        return compiled(*args)

    return run


_not_emulated.provide(globals(), "habana_frameworks.torch.dynamo.compile_backend.backends")
