"""The SDK's CPU fallback: which operators Gaudi runs on the host, counted and refused as the bridge does.

On Gaudi every operator without an HPU kernel of the bridge's own reaches its boxed fallback
(gaudi-pytorch-bridge 1.19.0, ``hpu_ops/cpu_fallback.cpp:90-118``), which, in this order:

1. refuses it when ``PT_HPU_PLACE_ON_CPU`` is set and does not name it: "<op> is not yet supported on HPU."
   (``habana_kernels/fallback_helper.h``; the variable lists operators allowed on the host, comma-separated, and
   ``none`` allows none);
2. counts it and emits the ``CPU_FALLBACK`` event that ``metric_global("cpu_fallback")`` counts;
3. refuses it inside an HPU graph capture: "cpu fallback is not supported during hpu graph capturing";
4. runs it on the host.

The emulated device runs every operator on the host, so it cannot tell the fallbacks apart by itself. The emulator
gives it the bridge's published list of operators with HPU kernels (``hpu_kernels_1_19.txt``, generated from the
bridge's ``scripts/ops_list/ops.hpu``); the device reports each operator outside the list that reaches its boxed
fallback, and this module does steps 1 to 3 for it. An operator torch decomposes above the HPU key
(CompositeExplicitAutograd kernels: ``zeros_like``, ``stack``) is not a fallback, on Gaudi as here.

Where the emulator differs: the list was written by the bridge with SDK 1.16 on torch 2.2, so an operator torch added
since then counts as a fallback here although a newer SDK may have a kernel for it; and an operator whose HPU kernel
exists but refuses a dtype, which the bridge also sends to the host, is not counted here.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import _native

__all__ = ["PLACE_ON_CPU_VAR", "TABLE", "install", "operators_with_kernels"]

#: The SDK's variable that restricts the CPU fallback to the operators it names (``scripts/env_flags.yaml``).
PLACE_ON_CPU_VAR = "PT_HPU_PLACE_ON_CPU"
#: The bridge's list of operators with HPU kernels, one name per line (``#`` lines say where it comes from).
TABLE = Path(__file__).with_name("hpu_kernels_1_19.txt")

_CAPTURE_REFUSAL = "cpu fallback is not supported during hpu graph capturing"


def operators_with_kernels() -> list[str]:
    """The operators Gaudi's bridge has HPU kernels for, as torch names them (``aten::add.Tensor``)."""
    lines = TABLE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _placed_on_cpu(value: str) -> frozenset[str] | None:
    # As HpuFallbackHelper::enumerate_fallback: unset or empty allows every fallback (None); otherwise only the
    # named operators, and "none" anywhere in the list allows none.
    if not value:
        return None
    names = value.split(",")
    return frozenset() if "none" in names else frozenset(names)


class _Listener:
    def __init__(self, placed_on_cpu: frozenset[str] | None) -> None:
        self._placed_on_cpu = placed_on_cpu

    def __call__(self, op_name: str) -> str | None:
        if self._placed_on_cpu is not None and op_name not in self._placed_on_cpu:
            return f"{op_name} is not yet supported on HPU."
        from .hpu import _hpu_graph
        from .hpu.metrics import metrics

        metrics._record_cpu_fallback(op_name)
        if _hpu_graph.is_current_stream_capturing():
            return _CAPTURE_REFUSAL
        return None


def install() -> None:
    """Have the loaded device report the operators Gaudi runs through its CPU fallback (read at load, as the SDK)."""
    placed_on_cpu = _placed_on_cpu(os.environ.get(PLACE_ON_CPU_VAR, ""))
    _native.device().set_fallback_listener(operators_with_kernels(), _Listener(placed_on_cpu))
