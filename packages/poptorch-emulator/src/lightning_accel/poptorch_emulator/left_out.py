"""poptorch 3.4 names the emulator does not reproduce, why, and the stand-ins that say so when used.

Each name exists in the emulator (so that code importing it loads), but calling it, or reading an attribute of it,
raises ``poptorch.Error("poptorch.<name> is not emulated: <reason>")``. ``poptorch.poptorch_core`` is a module of its
own (:mod:`.poptorch_core`), as poptorch's is, with the same refusal.
"""

from __future__ import annotations

from typing import Any

from .errors import Error

__all__ = ["LEFT_OUT", "left_out", "refusal"]

_EXECUTABLES = "the emulator compiles no Poplar executable to save, load or export"
_COUNTERS = "it reads the IPU's hardware cycle and latency counters, which the emulator has none of"
_CUSTOM = "custom PopART operators run C++ code the emulator cannot load"
_INTERNAL = "it is poptorch's C++ binding (poptorch_core), which the emulator does not have"

LEFT_OUT: dict[str, str] = {
    "poptorch.load": _EXECUTABLES,
    "poptorch.PoplarExecutor.save": _EXECUTABLES,
    "poptorch.PoplarExecutor.compileAndExport": _EXECUTABLES,
    "poptorch.PoplarExecutor.loadExecutable": _EXECUTABLES,
    "poptorch.PoplarExecutor.cycleCount": _COUNTERS,
    "poptorch.PoplarExecutor.getPerfCounters": _COUNTERS,
    "poptorch.PoplarExecutor.getLatency": _COUNTERS,
    "poptorch.PoplarExecutor.getHostIpuLatency": _COUNTERS,
    "poptorch.PoplarExecutor.getComputeLatency": _COUNTERS,
    "poptorch.PoplarExecutor.getIpuHostLatency": _COUNTERS,
    "poptorch.PoplarExecutor.getAnchoredTensor": (
        "the emulator runs ATen graphs without PopART's tensor names, so no internal tensor can be anchored; return "
        "it from the model instead"
    ),
    "poptorch.custom_op": _CUSTOM,
    "poptorch.ctc_beam_search_decoder": "a PopLibs operator without a PyTorch counterpart",
    "poptorch.fps": "a PopTorch Geometric operator without a PyTorch counterpart",
    "poptorch.nearest": "a PopTorch Geometric operator without a PyTorch counterpart",
    "poptorch.accessAttributes": _INTERNAL,
    "poptorch.getIpuTensorId": _INTERNAL,
    "poptorch.importPoptorchMetadataFromFile": _INTERNAL,
    "poptorch.poptorch_core": _INTERNAL,
    "poptorch.profiling": "its channels record PopVision trace events; IPUStrategy(autoreport=True) writes reports",
}


class _LeftOut:
    """Stands in for a poptorch name the emulator does not reproduce."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise refusal(self._name)

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise refusal(self._name)

    def __repr__(self) -> str:
        return f"<{self._name}: not emulated>"


def refusal(name: str) -> Error:
    """The ``poptorch.Error`` that using ``name`` (a key of :data:`LEFT_OUT`) raises."""
    return Error(f"{name} is not emulated: {LEFT_OUT[name]}.")


def left_out(name: str) -> Any:
    """The stand-in for ``name`` (a key of :data:`LEFT_OUT`)."""
    return _LeftOut(name)
