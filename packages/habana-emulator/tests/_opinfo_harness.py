"""Run torch's own operator database (OpInfo) on the emulated ``"hpu"`` and on the CPU, and compare.

torch ships ``torch.testing._internal.common_methods_invocations.op_db``: one ``OpInfo`` per operator, with sample
inputs, the dtypes it supports per device, and whether it supports autograd. A *case* is one sample input of one
OpInfo in one dtype, in one direction:

- ``forward``: the operator on a copy of the sample generated for ``"hpu"`` and on a host copy of it (same values,
  sizes, strides and storage offset; tensors the OpInfo put on the host stay there; the same random seed before
  each run). The results are equal within the dtype's tolerances (or the OpInfo's own tolerance override), and the
  ``"hpu"`` run's tensors are on ``"hpu"`` (or where a ``device=`` argument says); or both runs raise an exception of
  the same type. Operators whose results are uninitialised memory (:data:`UNCOMPARABLE`) are compared by shape,
  dtype and device only.
- ``backward``: for an OpInfo that supports autograd in that dtype, the gradients of every floating input that
  requires grad, for the same seeded random output gradients, are equal (``None`` where the CPU's is ``None``).

Cases are numbered by the position of their sample in ``op.sample_inputs("hpu", dtype, requires_grad=...)``
(generated under a fixed seed, so the numbering is stable for a given torch version). The outcome of each case is a
:class:`CaseResult`; the test module turns them into passes, failures and the strict expected failures of the
known-failure table (``data/opinfo_known_failures.json``).

This module imports ``op_db`` (which needs the ``expecttest`` package) on first use.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = [
    "DIRECTIONS",
    "DTYPES",
    "UNCOMPARABLE",
    "CaseResult",
    "all_ops",
    "dtypes_of",
    "run_cases",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
DIRECTIONS = ("forward", "backward")

UNCOMPARABLE = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})
"""OpInfos whose results are uninitialised memory: compared by shape, dtype and device only."""

_SAMPLE_SEED = 0
_RUN_SEED = 1234
_GRAD_SEED = 4321


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case.

    ``status`` is ``"pass"`` (equal results), ``"both_raise"`` (the CPU and ``"hpu"`` raise the same exception
    type), or ``"fail"`` (``detail`` says how). ``cpu_ok`` is whether the CPU run succeeded.
    """

    op: str
    dtype: str
    direction: str
    index: int
    status: str
    cpu_ok: bool
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.op}|{self.dtype}|{self.direction}|{self.index}"


@cache
def _torch_testing() -> tuple[Any, Any]:
    """torch's ``op_db`` and ``toleranceOverride``, imported with torch's global backend flags left as they were.

    ``torch.testing._internal.common_utils`` freezes them when it is imported
    (``torch.backends.disable_global_flags()``, for torch's own suite); every later ``Trainer`` of this process sets
    ``torch.backends.cudnn.benchmark`` and would fail with "not allowed to set torch.backends.cudnn flags", so the flag
    is thawed again.
    """
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.common_methods_invocations import op_db

    if not frozen:
        # The flag lives in the globals of torch/backends/__init__.py, which disable_global_flags() rebinds.
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return op_db, toleranceOverride


@cache
def all_ops() -> dict[str, Any]:
    """Every OpInfo of torch's ``op_db`` by its full name (``name`` or ``name.variant``)."""
    return {op.full_name: op for op in _torch_testing()[0]}


def dtypes_of(op: Any) -> list[str]:
    """The dtypes of :data:`DTYPES` that ``op`` supports on the CPU."""
    supported = op.supported_dtypes("cpu")
    return [name for name, dtype in DTYPES.items() if dtype in supported]


def _differentiable(op: Any, dtype: torch.dtype) -> bool:
    return bool(op.supports_autograd) and dtype in op.supported_backward_dtypes("cpu")


# --- moving a sample -----------------------------------------------------------------------------------------------


def _same_layout(t: torch.Tensor, device: str) -> torch.Tensor:
    """A copy of ``t`` on ``device`` with the same sizes, strides, storage offset and ``requires_grad``."""
    if t.layout != torch.strided:
        out = t.detach().to(device, copy=True)
    else:
        # Copy the whole storage, then take the same view of it: partial and overlapping views stay what they are.
        elements = t.untyped_storage().nbytes() // t.element_size()
        flat = t.detach().as_strided((elements,), (1,), 0)
        out = flat.to(device, copy=True).as_strided(t.size(), t.stride(), t.storage_offset())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def _on_hpu(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "hpu"
    return isinstance(value, str) and (value == "hpu" or value.startswith("hpu:"))


def _copies(sample: Any, to_host: bool) -> tuple[Any, Any, Any]:
    """Fresh copies of the sample's ``(input, args, kwargs)``: on the host (``to_host``), or where they are.

    On the host copy, every ``"hpu"`` tensor becomes a CPU tensor and every ``"hpu"`` device argument ``"cpu"``;
    tensors the OpInfo put on the CPU on purpose (index tensors of ``tensor_split``...) stay there in both.
    """

    def leaf(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _same_layout(value, "cpu" if to_host else value.device.type)
        if to_host and _on_hpu(value):
            return torch.device("cpu") if isinstance(value, torch.device) else "cpu"
        return value

    def tree(value: Any) -> Any:
        return pytree.tree_map(leaf, value)

    return tree(sample.input), tree(sample.args), {k: tree(v) for k, v in sample.kwargs.items()}


# --- comparing -----------------------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    """The ``"hpu"`` result differs from the CPU's."""


def _tolerances(op: Any, dtype: torch.dtype) -> tuple[float, float] | None:
    """The largest tolerance override the OpInfo declares for ``dtype`` on the CPU (``None``: torch's defaults)."""
    toleranceOverride = _torch_testing()[1]
    best: tuple[float, float] | None = None
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for decorator in getattr(info, "decorators", ()):
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                tol = decorator.d[dtype]
                atol, rtol = float(tol.atol), float(tol.rtol)
                if best is None:
                    best = (atol, rtol)
                else:
                    best = (max(best[0], atol), max(best[1], rtol))
    return best


def _compare(
    expected: Any, actual: Any, tolerances: tuple[float, float] | None, values: bool, where: str, device: str
) -> None:
    """Compare the CPU result ``expected`` with the ``"hpu"`` run's ``actual``; its tensors belong on ``device``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{where}: CPU gave a tensor, 'hpu' gave {type(actual).__name__}")
        if actual.device.type != device:
            raise Mismatch(f"{where}: the result is on {actual.device}, not on {device!r}")
        if expected.dtype != actual.dtype or expected.shape != actual.shape:
            raise Mismatch(
                f"{where}: CPU gave {expected.dtype}{list(expected.shape)}, 'hpu' {actual.dtype}{list(actual.shape)}"
            )
        if expected.layout != actual.layout:
            raise Mismatch(f"{where}: CPU gave layout {expected.layout}, 'hpu' {actual.layout}")
        if not values:
            return
        host = actual.detach().cpu()
        cpu = expected.detach()
        if cpu.layout != torch.strided:
            cpu, host = cpu.to_dense(), host.to_dense()
        atol, rtol = tolerances if tolerances is not None else (None, None)
        try:
            torch.testing.assert_close(host, cpu, atol=atol, rtol=rtol, equal_nan=True, check_device=False)
        except AssertionError as exc:
            raise Mismatch(f"{where}: {str(exc).splitlines()[0]}") from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            raise Mismatch(f"{where}: CPU gave {type(expected).__name__} of {len(expected)}, 'hpu' {actual!r:.80}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _compare(e, a, tolerances, values, f"{where}[{i}]", device)
        return
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return
    if values and expected != actual:
        raise Mismatch(f"{where}: CPU gave {expected!r:.80}, 'hpu' {actual!r:.80}")


# --- running -------------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    output: Any = None
    error: BaseException | None = None


def _call(op: Any, args: tuple[Any, Any, Any]) -> _Run:
    inp, rest, kwargs = args
    torch.manual_seed(_RUN_SEED)
    try:
        return _Run(output=op(inp, *rest, **kwargs))
    except Exception as exc:
        return _Run(error=exc)


def _grad_inputs(args: tuple[Any, Any, Any]) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(args)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _grad_outputs(output: Any) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(output)
    return [
        t
        for t in leaves
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)
    ]


def _backward(sample: Any, run: _Run, args: tuple[Any, Any, Any], seeds: list[torch.Tensor]) -> _Run:
    try:
        outputs = _grad_outputs(sample.output_process_fn_grad(run.output))
        inputs = _grad_inputs(args)
        grads = [s.to(o.device) for s, o in zip(seeds, outputs, strict=True)]
        return _Run(output=torch.autograd.grad(outputs, inputs, grads, allow_unused=True))
    except Exception as exc:
        return _Run(error=exc)


def _result_device(args: tuple[Any, Any, Any]) -> str:
    """Where the results of a run on ``args`` belong: a ``device=`` argument's device, else ``"hpu"`` if any tensor or
    device argument is on it."""
    explicit = args[2].get("device")
    if explicit is not None:
        return torch.device(explicit).type
    for leaf in pytree.tree_leaves(args):
        if (isinstance(leaf, torch.Tensor) and leaf.device.type == "hpu") or _on_hpu(leaf):
            return "hpu"
    return "cpu"


def _describe(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first[:300]}"


@dataclass(frozen=True)
class _Comparison:
    """How an OpInfo's results are compared: tolerances, whether values count, and where the results belong."""

    tolerances: tuple[float, float] | None
    values: bool
    device: str


def _outcome(expected: _Run, actual: _Run, how: _Comparison, where: str) -> tuple[str, str]:
    if expected.error is not None:
        if actual.error is not None and type(actual.error) is type(expected.error):
            return "both_raise", ""
        if actual.error is not None:
            return "fail", f"CPU raised {_describe(expected.error)}; 'hpu' raised {_describe(actual.error)}"
        return "fail", f"CPU raised {_describe(expected.error)}; 'hpu' did not"
    if actual.error is not None:
        return "fail", f"'hpu' raised {_describe(actual.error)}"
    try:
        _compare(expected.output, actual.output, how.tolerances, how.values, where, how.device)
    except Mismatch as exc:
        return "fail", str(exc)
    return "pass", ""


def _our_warning(caught: list[warnings.WarningMessage]) -> str | None:
    """A deprecation warning attributed to this project's code: an error here, as everywhere in the test suite."""
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, FutureWarning)) and "lightning_accel" in w.filename:
            return f"our code warned: {w.category.__name__}: {w.message}"
    return None


def samples(op: Any, dtype: torch.dtype, device: str = "hpu") -> list[Any]:
    """The OpInfo's sample inputs for ``device``, generated under a fixed seed (so their numbering is stable)."""
    torch.manual_seed(_SAMPLE_SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(op.sample_inputs(device, dtype, requires_grad=_differentiable(op, dtype)))


def run_cases(op: Any, dtype_name: str, indices: set[int] | None = None) -> Iterator[CaseResult]:
    """Run the cases of ``op`` in ``dtype_name`` (only the samples in ``indices``, if given), forward then backward."""
    dtype = DTYPES[dtype_name]
    name = op.full_name
    how = _Comparison(_tolerances(op, dtype), op.name not in UNCOMPARABLE, "hpu")
    try:
        generated = samples(op, dtype)
    except Exception as exc:
        count = len(samples(op, dtype, "cpu"))
        for index in range(count):
            if indices is None or index in indices:
                yield CaseResult(
                    name, dtype_name, "forward", index, "fail", True, f"samples on 'hpu': {_describe(exc)}"
                )
        return
    for index, sample in enumerate(generated):
        if indices is None or index in indices:
            yield from _run_sample(op, dtype_name, index, sample, how)


def _run_sample(op: Any, dtype_name: str, index: int, sample: Any, how: _Comparison) -> Iterator[CaseResult]:
    name = op.full_name
    hpu_args = _copies(sample, to_host=False)
    cpu_args = _copies(sample, to_host=True)
    how = replace(how, device=_result_device(hpu_args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu = _call(op, cpu_args)
        hpu = _call(op, hpu_args)
    ours = _our_warning(caught)
    status, detail = ("fail", ours) if ours else _outcome(cpu, hpu, how, "output")
    yield CaseResult(name, dtype_name, "forward", index, status, cpu.error is None, detail)
    if not _differentiable(op, DTYPES[dtype_name]) or cpu.error is not None:
        return
    try:
        outputs = _grad_outputs(sample.output_process_fn_grad(cpu.output))
    except Exception:
        return
    if not outputs or not _grad_inputs(cpu_args):
        return
    generator = torch.Generator().manual_seed(_GRAD_SEED)
    seeds = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu_grads = _backward(sample, cpu, cpu_args, seeds)
        hpu_grads = _Run(error=hpu.error) if hpu.error is not None else _backward(sample, hpu, hpu_args, seeds)
    status, detail = _outcome(cpu_grads, hpu_grads, how, "grad")
    yield CaseResult(name, dtype_name, "backward", index, status, cpu_grads.error is None, detail)
