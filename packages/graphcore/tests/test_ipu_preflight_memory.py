"""The IPU report's memory per IPU and its pipeline split suggestion (estimates made on the host, without Poplar)."""

from __future__ import annotations

import pytest
import torch

from lightning_accel.graphcore.preflight import ipu_preflight
from lightning_accel.graphcore.preflight_memory import IPU_MEMORY, ipu_memory, suggest_split

FLOAT = 4


class Stack(torch.nn.Module):
    """Sequential square layers of the given widths (a layer whose width differs from the input is skipped)."""

    def __init__(self, widths: list[int]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(w, w) for w in widths])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.sum()


def _params(width: int) -> int:
    return (width * width + width) * FLOAT


def test_gc200_memory_is_its_tiles_sram() -> None:
    assert IPU_MEMORY["gc200"] == 1472 * 624 * 1024  # Graphcore's "900 MB" In-Processor-Memory


def test_a_model_too_big_for_one_ipu_fits_when_split_over_two() -> None:
    # 8 layers of 2816: 254 MB of float32 weights; with Adam (two accumulators) and the gradients, 4x that on one IPU.
    model = Stack([2816] * 8)
    batch = torch.randn(2, 2816)
    (alone,) = ipu_memory(model, batch, optimizer="adam")
    weights = 8 * _params(2816)
    assert (alone.weights, alone.gradients, alone.optimizer) == (weights, weights, 2 * weights)
    assert alone.total > IPU_MEMORY["gc200"] and not alone.fits

    split = suggest_split(model, batch, ipus=2, optimizer="adam")
    assert split.starts == [0, 4]
    assert [stage.blocks for stage in split.stages] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [stage.stash for stage in split.stages] == [3, 1]
    assert all(stage.fits for stage in split.stages)
    assert split.code()[1] == "poptorch.BeginBlock(model.layers[4], ipu_id=1)"


def test_memory_per_begin_block_stage_as_annotated() -> None:
    import poptorch

    model = Stack([32] * 4)
    poptorch.BeginBlock(model.layers[2], ipu_id=1)
    first, second = ipu_memory(model, torch.randn(8, 32), optimizer="sgd_momentum")
    assert (first.ipu, second.ipu) == (0, 1)
    assert first.weights == second.weights == 2 * _params(32)
    assert first.optimizer == first.weights  # momentum: one accumulator per weight
    # The first stage of two stashes three micro-batches' activations (PopART: 2 * stages after it + 1).
    assert (first.stash, second.stash) == (3, 1)
    assert first.activations > 0 and second.activations > 0


class Unbalanced(torch.nn.Module):
    """Four small layers, then two large ones, each taking the previous one's output through a projection."""

    def __init__(self) -> None:
        super().__init__()
        widths = [64, 64, 64, 64, 512, 512]
        self.layers = torch.nn.ModuleList([torch.nn.Linear(w, w) for w in widths])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(torch.nn.functional.pad(x, (0, layer.in_features - x.shape[-1]))))
        return x.sum()


def test_split_suggestion_balances_an_unbalanced_stack() -> None:
    model = Unbalanced()
    batch = torch.randn(4, 64)
    assert suggest_split(model, batch, ipus=2).starts == [0, 5]
    three = suggest_split(model, batch, ipus=3)
    assert three.starts == [0, 4, 5]
    assert [stage.blocks for stage in three.stages] == [(0, 1, 2, 3), (4,), (5,)]


def test_split_suggestion_weighs_the_pipeline_stash() -> None:
    # Weights are negligible and activations equal per layer (block 0 also keeps the input: two units), and IPU 0
    # keeps 3 micro-batches of them, IPU 1 one: IPU 0 gets 1 block (3 x 2 units), not the half by weights.
    model = Stack([8] * 8)
    split = suggest_split(model, torch.randn(4096, 8), ipus=2)
    assert split.starts == [0, 1]
    assert [(stage.activations, stage.stash) for stage in split.stages] == [
        (2 * 4096 * 8 * 4, 3),
        (7 * 4096 * 8 * 4, 1),
    ]


def test_preflight_reports_the_ipu_that_does_not_fit_and_the_split_that_fits() -> None:
    model = Stack([640] * 4)  # 6.6 MB of weights: with Adam, 26 MB; a Mk1 GC2 has 304 MiB
    batch = torch.randn(2, 640)
    assert [f.kind for f in ipu_preflight(model, batch, optimizer="adam", device="gc2")] == []
    big = Stack([2048] * 5)  # 84 MB of weights: 336 MB with Adam
    (finding,) = ipu_preflight(big, torch.randn(2, 2048), optimizer="adam", device="gc2")
    assert finding.kind == "memory"
    assert finding.what.startswith("IPU 0 needs ") and finding.what.endswith("of its 304.0 MiB")
    assert "out-of-memory" in finding.why
    assert finding.fix.startswith("Split it over 2 IPUs: poptorch.BeginBlock(model.layers[0], ipu_id=0); ")
    assert finding.details["fits"] is False

    findings = ipu_preflight(big, torch.randn(2, 2048), ipus=2, optimizer="adam", device="gc2")
    assert [f.kind for f in findings] == ["pipeline_split"]
    assert findings[0].details["starts"] == [0, 2]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, x: ipu_memory(m, x, optimizer="adagrad"), r"optimizer='adagrad': accepted names are sgd, "),
        (lambda m, x: ipu_memory(m, x, device="mk3"), r"device='mk3': accepted IPUs are gc200, bow, gc2"),
        (lambda m, x: ipu_memory(m, x, gradient_accumulation=0), r"gradient_accumulation=0: must be a positive int"),
        (lambda m, x: suggest_split(m, x, ipus=1), r"ipus=1: a pipeline split needs an int of at least 2 IPUs"),
        (lambda m, x: suggest_split(m, x, ipus=5), r"ipus=5: model.layers has only 4 blocks; split over at most 4"),
        (lambda m, x: suggest_split(m, x, ipus=2, blocks="heads"), r"blocks='heads': not a non-empty nn.ModuleList"),
        (lambda m, x: ipu_preflight(m, x, ipus=0), r"ipus=0: must be a positive int"),
        (
            lambda m, x: ipu_memory(m, x, optimizer=torch.optim.Adagrad(m.parameters())),
            r"optimizer=Adagrad: poptorch 3.4 trains with SGD, Adam, AdamW, RMSprop or LAMB only",
        ),
    ],
)
def test_bad_memory_arguments_are_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(Stack([4] * 4), torch.randn(2, 4))  # type: ignore[operator]


def test_a_split_needs_sequential_blocks() -> None:
    with pytest.raises(ValueError, match=r"Linear has no nn.ModuleList of layers to split"):
        suggest_split(torch.nn.Linear(4, 4), torch.randn(2, 4), ipus=2)

    class Twice(Stack):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + self.layers[0](x).sum()

    with pytest.raises(ValueError, match=r"model.layers: its blocks ran in the order \[0, 1, 2, 3, 0\], not each"):
        suggest_split(Twice([4] * 4), torch.randn(2, 4), ipus=2)
