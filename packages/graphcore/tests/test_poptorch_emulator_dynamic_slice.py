"""Issue 47, item 2: dynamic slices as poptorch 3.4 compiles them, written from poptorch's ``tests/slice_test.py``.

A dynamic slice takes ``size`` elements from a position held in a tensor, then every ``step``-th of them
(``popart_canonicalization/SliceOps.cpp``: ``dynamicSliceHandler`` then ``subsampleSlice``; the meta kernel's shape
is ``ceil(size / step)``, ``dispatch_tracer/RegisterMetaOps.cpp.inc:342-348``). The size must be positive and divide
the sliced dimension. Slice bounds held in host tensors (not on the IPU) are ordinary Python slices; a bound
computed on the IPU is read with ``aten::item``, which poptorch refuses (its user guide: "Standard PyTorch slicing
syntax cannot currently be used to create dynamic slices").
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable  # typing, not collections.abc: the alias below is subscripted at run time on 3.8

import pytest
import torch

_EIGHT = torch.tensor([2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
_TWO_ROWS = torch.tensor([[2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]])

Bound = Callable[[Any], Any]


class _Forward(torch.nn.Module):
    def __init__(self, forward: Callable[..., Any]) -> None:
        super().__init__()
        self._forward = forward

    def forward(self, *args: Any) -> Any:
        return self._forward(*args)


def _dynamic_slice(
    poptorch: ModuleType, tensor: torch.Tensor, extra: torch.Tensor, start: Bound, end: Bound, step: int
) -> Any:
    # slice_test.py's dynamic_slice_harness: compiled with other values than it runs with, so that a start burnt
    # into the executable would show.
    one = torch.tensor([1], dtype=torch.int)
    size = int((end(one) - start(one)).item())
    model = _Forward(lambda t, e: poptorch.dynamic_slice(t, 0, start(e), size, step))
    executor = poptorch.inferenceModel(model)
    executor.compile(torch.randn_like(tensor), extra + torch.tensor([20]))
    return executor(tensor, extra)


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize(
    ("tensor", "extra", "start", "end", "first", "size"),
    [
        (_EIGHT, torch.tensor([1]), lambda e: e, lambda e: e + 4, 1, 4),
        (_EIGHT, torch.tensor([5]), lambda e: e - 4, lambda e: e, 1, 4),
        (_EIGHT, torch.tensor([5]), lambda e: e + 3 - 10 + 3, lambda e: e - 6 + 4, 1, 2),
        (_TWO_ROWS, torch.tensor([0]), lambda e: e.to(torch.int32), lambda e: e.to(torch.int32) + 1, 0, 1),
    ],
    ids=["add", "subtract", "mix_up", "two_dims"],
)
def test_a_dynamic_slice_takes_size_elements_then_every_step_th(
    poptorch: ModuleType,
    tensor: torch.Tensor,
    extra: torch.Tensor,
    start: Bound,
    end: Bound,
    first: int,
    size: int,
    step: int,
) -> None:
    out = _dynamic_slice(poptorch, tensor, extra, start, end, step)
    assert out.tolist() == tensor[first : first + size : step].tolist()
    # The host runs poptorch's CPU kernel, the same slice.
    host = poptorch.dynamic_slice(tensor, 0, start(extra), size, step)
    assert host.tolist() == out.tolist()


@pytest.mark.parametrize(
    ("end", "step", "message"),
    [
        (lambda e: e, 1, r"The start and end of a slice must be different\."),
        (lambda e: e - 2, 2, r"Taking a slice of a tensor with the end less than the start is not supported\."),
        (lambda e: e + 7, 1, r"The size of the slice \(7\) must be a factor of the slicing dimension \(8\)\."),
    ],
    ids=["equal", "less_than", "not_a_factor"],
)
def test_a_dynamic_slice_poptorch_cannot_compile_is_refused(
    poptorch: ModuleType, end: Bound, step: int, message: str
) -> None:
    with pytest.raises(poptorch.Error, match=message):
        _dynamic_slice(poptorch, _EIGHT, torch.tensor([5]), lambda e: e, end, step)


def test_a_dynamic_slice_refuses_a_size_that_is_not_an_int(poptorch: ModuleType) -> None:
    # python/ops.py:311-312.
    with pytest.raises(poptorch.Error, match=r"Size must be an integer\."):
        poptorch.dynamic_slice(_EIGHT, 0, torch.tensor([1]), 2.0, 1)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_slice_bounds_held_in_host_tensors_are_ordinary_slices_in_training(poptorch: ModuleType, step: int) -> None:
    # slice_test.py::test_dynamic_slice_two_dims_twice_sliced: the bounds are tensors the model holds on the host.
    row, column = torch.tensor([1]), torch.tensor([0])

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> Any:
            t = self.lin(x.flatten()).reshape(4, 8)
            out = t[row : row + 2 : step, column : column + 4 : step]
            return out, poptorch.identity_loss(out**2, reduction="sum")

    torch.manual_seed(0)
    model = Model()
    before = model.lin.weight.detach().clone()
    x = torch.randn(4, 8)
    expected, _ = model(x)
    out, _ = poptorch.trainingModel(model)(x)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(before, model.lin.weight)


def test_a_slice_bound_computed_on_the_ipu_is_refused_as_an_item(poptorch: ModuleType) -> None:
    # A bound that is an input of the model is on the IPU: torch reads it with aten::item, which poptorch refuses
    # (RegisterAtenOverloads.cpp: "aten::item is only supported in eager mode"); poptorch.dynamic_slice is the way.
    model = _Forward(lambda t, start: t[start : start + 2])
    with pytest.raises(poptorch.Error, match=r"aten::item is only supported in eager mode"):
        poptorch.inferenceModel(model)(torch.arange(8.0), torch.tensor([3]))


def _dynamic_update(
    poptorch: ModuleType, tensor: torch.Tensor, src: torch.Tensor, extra: torch.Tensor, size: int, dim: int = 0
) -> Any:
    # slice_test.py's dynamic_update_harness, with the start the extra input itself.
    model = _Forward(lambda t, s, e: poptorch.dynamic_update(t, s, dim, e, size))
    executor = poptorch.inferenceModel(model)
    executor.compile(torch.randn_like(tensor), torch.randn_like(src), extra + torch.tensor([20]))
    return executor(tensor, src, extra)


@pytest.mark.parametrize(("size", "message"), [(0, "must be different"), (-2, "end less than the start")])
def test_a_dynamic_update_poptorch_cannot_compile_is_refused(poptorch: ModuleType, size: int, message: str) -> None:
    with pytest.raises(poptorch.Error, match=message):
        _dynamic_update(poptorch, _EIGHT, torch.tensor([7.0, 8.0]), torch.tensor([5]), size)


def test_a_dynamic_update_names_both_dimensionalities(poptorch: ModuleType) -> None:
    with pytest.raises(poptorch.Error, match=r"input and src tensors must have same dimensionality\. \(2\) vs \(1\)"):
        _dynamic_update(poptorch, _TWO_ROWS, -torch.ones(8), torch.tensor([0]), 1)


def test_a_dynamic_update_names_both_dtypes_as_the_ipu_holds_them(poptorch: ModuleType) -> None:
    # slice_test.py::test_dynamic_update_wrong_dtype: the int64 source is int32 on the IPU.
    index = torch.tensor([1])
    model = _Forward(lambda t, s, e: poptorch.dynamic_update(t, s, 0, index, 1))
    executor = poptorch.inferenceModel(model)
    with pytest.raises(
        poptorch.Error, match=r"input and src tensor must have same dtype\. \(torch\.float32 vs torch\.int32\)"
    ):
        executor.compile(torch.randn(8), torch.tensor([-1]), index + 20)


@pytest.mark.parametrize(("dim", "start", "size"), [(0, 1, 2), (1, 1, 2), (2, 2, 3)])
def test_a_dynamic_update_writes_the_source_at_the_start(poptorch: ModuleType, dim: int, start: int, size: int) -> None:
    tensor = torch.ones(3, 4, 5)
    shape = list(tensor.shape)
    shape[dim] = size
    src = -torch.ones(shape)
    expected = tensor.clone()
    expected.narrow(dim, start, size).copy_(src)
    assert torch.equal(_dynamic_update(poptorch, tensor, src, torch.tensor([start]), size, dim), expected)
    assert torch.equal(poptorch.dynamic_update(tensor, src, dim, torch.tensor([start]), size), expected)
