"""Issue 47, item 2: automatic loss scaling's ``lossScaleUpdateFactor`` in the optimizer state, written from poptorch
3.4's ``tests/options_test.py::test_automatic_loss_scaling`` and PopART's ``popx/op/lossscaleupdatex.cpp``.

With ``Options.Training.setAutomaticLossScaling(True)``, ``optimizer.state_dict()["ipu_state"]`` holds the factor
from compilation on; after each weight update it doubles, or halves when too many scaled float16 gradients reach the
histogram's bin edge (1/16 of float16's largest value by default).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import torch


class _Weighted(torch.nn.Module):
    """A float16 weight times the input: its gradient is the input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(5, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(self.w * x)


class _WithLoss(torch.nn.Module):
    def __init__(self, poptorch: ModuleType) -> None:
        super().__init__()
        self.inner = _Weighted()
        self._identity_loss = poptorch.identity_loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._identity_loss(self.inner(x), reduction="sum")


def _training(
    poptorch: ModuleType, optim: Any, automatic: bool = True, threshold: float | None = None, **kwargs: Any
) -> tuple[Any, Any]:
    model = _WithLoss(poptorch)
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(automatic)
    if threshold is not None:
        opts._Popart.set("automaticLossScalingSettings.thresholdUpperCountProportion", threshold)
    optimizer = optim(model.parameters(), lr=0.0, loss_scaling=2.0, **kwargs)
    return poptorch.trainingModel(model, opts, optimizer), optimizer


def _factors(executor: Any, optimizer: Any, x: torch.Tensor, steps: int) -> list[float]:
    executor.compile(x)
    factors = []
    for _ in range(steps):
        factors.append(float(optimizer.state_dict()["ipu_state"]["lossScaleUpdateFactor"]))
        executor(x)
    return factors


def _cpu_has_float16_addcmul() -> bool:
    try:
        torch.zeros(1, dtype=torch.float16).addcmul_(
            torch.ones(1, dtype=torch.float16), torch.ones(1, dtype=torch.float16)
        )
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("optim_name", ["SGD", "Adam", "AdamW", "RMSprop", "LAMB"])
def test_the_update_factor_doubles_while_float16_gradients_stay_small(poptorch: ModuleType, optim_name: str) -> None:
    if optim_name != "SGD" and not _cpu_has_float16_addcmul():
        # The emulator updates float16 weights with torch's optimizers on the CPU backing it.
        pytest.skip("this torch's CPU optimizers other than SGD cannot update float16 weights (torch 2.0)")
    optim = getattr(poptorch.optim, optim_name)
    kwargs = {"use_combined_accum": False} if optim_name == "SGD" else {}
    executor, optimizer = _training(poptorch, optim, **kwargs)
    assert _factors(executor, optimizer, torch.ones(5, dtype=torch.float16), 5) == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_the_update_factor_halves_when_scaled_gradients_reach_the_bin_edge(poptorch: ModuleType) -> None:
    # loss_scaling 2: the gradients 5000 are 10000, then 5000 (at or above 65504 / 16): halved twice; at 2500, doubled.
    executor, optimizer = _training(poptorch, poptorch.optim.SGD)
    assert _factors(executor, optimizer, torch.full((5,), 5000.0, dtype=torch.float16), 4) == [1.0, 0.5, 0.25, 0.5]


def test_a_loaded_update_factor_is_the_one_the_next_step_updates(poptorch: ModuleType) -> None:
    executor, optimizer = _training(poptorch, poptorch.optim.SGD)
    x = torch.ones(5, dtype=torch.float16)
    executor(x)
    state = optimizer.state_dict()
    state["ipu_state"]["lossScaleUpdateFactor"] = torch.tensor(64.0)
    optimizer.load_state_dict(state)
    executor(x)
    assert float(optimizer.state_dict()["ipu_state"]["lossScaleUpdateFactor"]) == 128.0


def test_without_automatic_loss_scaling_there_is_no_update_factor(poptorch: ModuleType) -> None:
    executor, optimizer = _training(poptorch, poptorch.optim.SGD, automatic=False)
    executor(torch.ones(5, dtype=torch.float16))
    assert "lossScaleUpdateFactor" not in optimizer.state_dict()["ipu_state"]


def test_a_threshold_outside_zero_to_one_is_refused(poptorch: ModuleType) -> None:
    executor, _ = _training(poptorch, poptorch.optim.SGD, threshold=1.5)
    with pytest.raises(ValueError, match=r"Out of range value for 'thresholdUpperCountProportion'\. The current value"):
        executor(torch.ones(5, dtype=torch.float16))
