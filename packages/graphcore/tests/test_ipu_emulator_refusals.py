"""poptorch 3.4 refuses at compile what an IPU graph cannot hold; the emulator refuses the same, with its words.

Also what an IPU graph does hold, as poptorch compiles it: int32/float32 in place of int64/float64, an in-place
change to an input made once, and dynamic slices compiled for any start (issue 47).

Each case comes from poptorch's source at tag ``sdk/poptorch/3.4.0``: the operators without a canonicalisation
handler (``poptorch/source/ErrorOnUnsupportedAten.cpp``; the table ``poptorch_3_4_ops.json`` of the emulator), the
meta kernels that refuse data-dependent output shapes (``dispatch_tracer/RegisterMetaOps.cpp.inc``,
``tests/index_ops_test.py::test_index_bool_mask_failure``) and the loss search, which finds only the losses it lowers
(``popart_canonicalization/LossOps.cpp:636-652``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

UNSUPPORTED = (
    "Unsupported ops found in compiled model: [{}]. Not all operations are supported yet by Graphcore's PyTorch "
    "compiler. If you believe any of these should be, please report this message to support@graphcore.ai."
)


# The emulator traces with the torch it runs on. From torch 2.1 on, repeat_interleave with an int count is recorded as
# an operator poptorch has no rule for ("Unsupported ops found"); on torch 2.0.1, poptorch's own torch, it dispatches
# as repeat_interleave.Tensor, which poptorch fails earlier, in type inference (the ipu_stack_tests session). torch
# 2.0.1's gaussian_nll_loss takes no float variance at all.
NEWER_TORCH = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 1),
    reason="expects torch 2.1 or later's recording of the call (torch 2.0.1 records another operator)",
)


class Head(torch.nn.Module):
    """A linear layer followed by ``tail(hidden, x)``."""

    def __init__(self, tail: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.tail = tail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.fc(x), x)


def _error_text(err: BaseException) -> str:
    return str(getattr(err, "message", err))


@pytest.mark.parametrize(
    ("tail", "operator"),
    [
        pytest.param(lambda h, x: torch.repeat_interleave(h, 2, dim=0), "aten::repeat_interleave", marks=NEWER_TORCH),
        (lambda h, x: torch.linalg.inv(h + 4 * torch.eye(4)), "aten::linalg_inv_ex"),
    ],
    ids=["repeat_interleave_int", "linalg_inv"],
)
def test_an_operator_without_lowering_is_refused_at_compile(
    poptorch: ModuleType, tail: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], operator: str
) -> None:
    executor = poptorch.inferenceModel(Head(tail))
    with pytest.raises(poptorch.Error) as info:
        executor(torch.randn(4, 4))
    assert _error_text(info.value) == UNSUPPORTED.format(operator)
    assert not executor.isCompiled()


@NEWER_TORCH
def test_every_unsupported_operator_is_listed_and_unused_ones_are_dropped(poptorch: ModuleType) -> None:
    def tail(h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        torch.linalg.inv(h + 4 * torch.eye(4))  # unused: poptorch's dead-code elimination drops it
        return F.huber_loss(h, x) + torch.repeat_interleave(h, 2, dim=0).sum()

    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Head(tail))(torch.randn(4, 4))
    assert _error_text(info.value) == UNSUPPORTED.format("aten::huber_loss, aten::repeat_interleave")


@pytest.mark.parametrize(
    ("tail", "operator"),
    [
        (lambda h, x: torch.unique(h), "aten::_unique2"),
        # Only its length used, as torchmetrics' argument checks use it: the shape alone needs the meta kernel.
        (lambda h, x: h * len(torch.unique(x)), "aten::_unique2"),
        (lambda h, x: torch.masked_select(h, h > 0), "aten::masked_select"),
        (
            lambda h, x: torch.repeat_interleave(h, torch.tensor([1, 2, 1, 1]), dim=0),
            "aten::repeat_interleave.Tensor",
        ),
    ],
    ids=["unique", "unique_length", "masked_select", "repeat_interleave_tensor"],
)
def test_an_operator_with_a_data_dependent_shape_fails_type_inference(
    poptorch: ModuleType, tail: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], operator: str
) -> None:
    # torch 2.0.1 has no meta kernel for these, which poptorch infers every output shape with
    # (dispatch_tracer/TypeInferenceHandler.cpp:30-37).
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Head(tail))(torch.randn(4, 4))
    assert _error_text(info.value) == (
        f"Type inference failed for {operator} because the operator doesn't have an implementation for the Meta "
        "backend."
    )


def test_one_hot_needs_its_number_of_classes(poptorch: ModuleType) -> None:
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Head(lambda h, x: F.one_hot((x.abs() * 2).long().clamp(max=3)).float()))(
            torch.randn(4, 4)
        )
    assert _error_text(info.value) == "OneHot num classes must be specified and must be constant."


def test_nonzero_is_refused_for_its_data_dependent_shape(poptorch: ModuleType) -> None:
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Head(lambda h, x: torch.nonzero(h > 0)))(torch.randn(4, 4))
    assert _error_text(info.value) == (
        "Operations using aten::nonzero are unsupported because the output shape is determined by the tensor "
        "values. The IPU cannot support dynamic output shapes."
    )


def test_bincount_needs_minlength(poptorch: ModuleType) -> None:
    def counts(minlength: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return lambda h, x: torch.bincount((x.abs() * 2).int().flatten().clamp(max=5), minlength=minlength)

    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Head(counts(0)))(torch.randn(4, 4))
    assert _error_text(info.value) == (
        "Bincount `minlength` must be specified and must be a constant. On the IPU MK2 platform the minimum length "
        "is also the maximum length"
    )
    x = torch.randn(4, 4)
    out = poptorch.inferenceModel(Head(counts(6)))(x)
    assert out.tolist() == torch.bincount((x.abs() * 2).int().flatten().clamp(max=5), minlength=6).tolist()


def test_boolean_mask_indexing_is_refused(poptorch: ModuleType) -> None:
    # As poptorch's own test expects (tests/index_ops_test.py:124-127).
    with pytest.raises(torch._subclasses.fake_tensor.DynamicOutputShapeException):
        poptorch.inferenceModel(Head(lambda h, x: h[h > 0]))(torch.randn(4, 4))


class Loss(torch.nn.Module):
    def __init__(self, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.loss = loss

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.fc(x), y)


@pytest.mark.parametrize(
    ("loss", "target", "operator"),
    [
        (F.huber_loss, torch.randn(4, 4), "aten::huber_loss"),
        (F.multi_margin_loss, torch.tensor([0, 1, 2, 3]), "aten::multi_margin_loss"),
        (F.multilabel_margin_loss, torch.tensor([[0, 1, -1, 0]] * 4), "aten::multilabel_margin_loss_forward"),
    ],
    ids=["huber", "multi_margin", "multilabel_margin"],
)
def test_a_loss_without_lowering_is_refused(
    poptorch: ModuleType, loss: Callable[..., torch.Tensor], target: torch.Tensor, operator: str
) -> None:
    executor = poptorch.trainingModel(Loss(loss))
    with pytest.raises(poptorch.Error) as info:
        executor(torch.randn(4, 4), target)
    assert _error_text(info.value) == UNSUPPORTED.format(operator)


def test_gaussian_nll_loss_reads_a_device_value(poptorch: ModuleType) -> None:
    # torch's gaussian_nll_loss checks `torch.any(var < 0)` in Python: a host read of a device value in the graph.
    executor = poptorch.trainingModel(Loss(lambda out, y: F.gaussian_nll_loss(out, y, torch.ones_like(out))))
    with pytest.raises(poptorch.Error, match="aten::item is only supported in eager mode"):
        executor(torch.randn(4, 4), torch.randn(4, 4))


@pytest.mark.emulator_only  # torch 2.0.1, poptorch 3.4's, takes no float variance
@NEWER_TORCH
def test_gaussian_nll_loss_is_not_a_loss_poptorch_finds(poptorch: ModuleType) -> None:
    executor = poptorch.trainingModel(Loss(lambda out, y: F.gaussian_nll_loss(out, y, 1.0)))
    with pytest.raises(poptorch.Error, match="Couldn't find a loss in graph!"):
        executor(torch.randn(4, 4), torch.randn(4, 4))
    wrapped = poptorch.trainingModel(
        Loss(lambda out, y: poptorch.identity_loss(F.gaussian_nll_loss(out, y, 1.0), reduction="none"))
    )
    assert torch.isfinite(wrapped(torch.randn(4, 4), torch.randn(4, 4)))


def test_an_input_that_requires_grad_is_refused(poptorch: ModuleType) -> None:
    executor = poptorch.inferenceModel(torch.nn.Linear(4, 2))
    with pytest.raises(poptorch.Error) as info:
        executor(torch.ones(2, 4, requires_grad=True))
    text = _error_text(info.value)
    assert text.startswith(
        "An input tensor to an IPU model can not have requires_grad set to True, however input 0 does:"
    )
    assert text.endswith(
        "\nYou can set requires_grad=True from within the model as an alternative, and return gradients as outputs "
        "to your model, if required."
    )


class Tagged(torch.Tensor):
    """A tensor subclass, as some libraries register for buffers."""


def test_a_training_model_refuses_buffers_of_a_tensor_subclass(poptorch: ModuleType) -> None:
    model = Loss(F.mse_loss)
    model.register_buffer("scale", torch.ones(4).as_subclass(Tagged))
    with pytest.raises(poptorch.Error) as info:
        poptorch.trainingModel(model)
    assert _error_text(info.value) == f"All buffers must be an instance of torch.Tensor (Got {Tagged})"


def test_an_in_place_change_to_an_input_is_made_once(poptorch: ModuleType) -> None:
    class AddsToInput(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x * 2

    x = torch.zeros(2, 3)
    out = poptorch.inferenceModel(AddsToInput())(x)
    assert out.tolist() == [[2.0] * 3] * 2
    assert x.tolist() == [[1.0] * 3] * 2


class DTypes(torch.nn.Module):
    """Reports the dtypes its Python sees while traced, and computes in them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, torch.dtype] = {}

    def forward(self, counts: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Updated in place: poptorch runs a shallow copy of the model, which shares this dict.
        self.seen.update(counts=counts.dtype, values=values.dtype, arange=torch.arange(3).dtype)
        self.seen["sum"] = counts.sum().dtype
        # 2**20 * 4096 = 2**32 wraps to 0 in int32; in int64 the division gives 2**20 back.
        return (counts * 4096) // 4096, values + 1e-9


def test_int64_and_float64_are_narrowed_inside_the_graph(poptorch: ModuleType) -> None:
    # Every IPU tensor has the coerced type (poptorch/source/Utils.cpp:141-151, dispatch_tracer/Tensor.cpp:338-347).
    model = DTypes()
    counts, values = poptorch.inferenceModel(model)(
        torch.tensor([2**20, 3], dtype=torch.int64), torch.ones(2, dtype=torch.float64)
    )
    assert model.seen == {
        "counts": torch.int32,
        "values": torch.float32,
        "arange": torch.int32,
        "sum": torch.int32,
    }
    assert counts.tolist() == [0, 3]
    assert counts.dtype == torch.int32 and values.dtype == torch.float32
    assert values.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("step", [1, 2])
def test_a_dynamic_slice_compiles_for_any_start_and_runs_for_the_given_one(poptorch: ModuleType, step: int) -> None:
    # poptorch's tests/slice_test.py:62-86: compiled with a start past the end, run with another start.
    class Slice(torch.nn.Module):
        def forward(self, t: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
            return poptorch.dynamic_slice(t, 0, start - 4, 4, step)  # a size that divides the dimension (8)

    t, start = torch.arange(2.0, 10.0), torch.tensor([5])
    executor = poptorch.inferenceModel(Slice())
    executor.compile(torch.randn_like(t), start + 20)
    assert executor(t, start).tolist() == t[1:5:step].tolist()  # size elements, then every step-th of them


def test_int32_targets_and_indices_work_where_torch_wants_int64(poptorch: ModuleType) -> None:
    # poptorch widens index arguments for its type inference only (TypeInferenceHandler.cpp:277-307): the targets
    # of cross_entropy and the indices of gather are int32 on the IPU, and the results are torch's.
    model = Loss(lambda out, y: F.cross_entropy(out, y) + out.gather(1, y[:, None]).sum())
    x, y = torch.randn(4, 4), torch.tensor([0, 3, 1, 2])
    expected = model(x, y)
    with torch.inference_mode():  # as Lightning validates: composites then reach the tracer undecomposed
        assert torch.allclose(poptorch.inferenceModel(model)(x, y), expected)


def test_torchmetrics_accuracy_of_class_predictions_is_refused_in_the_graph(poptorch: ModuleType) -> None:
    # Its argument checks count the classes with torch.unique: compute metrics on the host (docs/graphcore/ipu.md).
    functional = pytest.importorskip("torchmetrics.functional")
    model = Head(lambda h, x: functional.accuracy(h.argmax(-1), x.argmax(-1), task="multiclass", num_classes=4))
    with pytest.raises(poptorch.Error, match=r"Type inference failed for aten::_unique2 "):
        poptorch.inferenceModel(model)(torch.randn(4, 4))
