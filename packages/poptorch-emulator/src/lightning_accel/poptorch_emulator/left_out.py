"""poptorch 3.4 names the emulator does not reproduce, why, and the stand-ins that say so when used.

Each name exists in the emulator (so that code importing it loads), but calling it, or reading an attribute of it,
raises ``poptorch.Error("poptorch.<name> is not emulated: <reason>")``.
"""

from __future__ import annotations

from typing import Any

from .errors import Error, RecoverableError, UnrecoverableError

__all__ = ["LEFT_OUT", "left_out", "poptorch_core"]

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

    def _refuse(self) -> Error:
        return Error(f"{self._name} is not emulated: {LEFT_OUT[self._name]}.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise self._refuse()

    def __repr__(self) -> str:
        return f"<{self._name}: not emulated>"


def left_out(name: str) -> Any:
    """The stand-in for ``name`` (a key of :data:`LEFT_OUT`)."""
    return _LeftOut(name)


class _PoptorchCore(_LeftOut):
    """``poptorch.poptorch_core``: its error classes, which are ``poptorch``'s (poptorch 3.4 ``python/__init__.py:41``).

    Every other name of the C++ binding raises ``poptorch.Error`` saying it is not emulated.
    """

    def __init__(self) -> None:
        super().__init__("poptorch.poptorch_core")
        self.Error = Error
        self.RecoverableError = RecoverableError
        self.UnrecoverableError = UnrecoverableError


def poptorch_core() -> Any:
    """The stand-in for ``poptorch.poptorch_core``."""
    return _PoptorchCore()
