"""HPU graphs for training: ``HPUGraphs(stages=("fit", ...))`` wraps the LightningModule in the SDK's ``ModuleCacher``.

As optimum-habana's ``use_hpu_graphs_for_training`` and Habana's Lightning examples do
(``htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)``), in lazy mode only (the SDK's
``ModuleCacher`` graphs nothing in eager mode: bridge 1.19.0 ``hpu/graphs.py:960``, ``:999``). A captured graph replays
without running the module's Python, so a counter in ``forward`` tells captures from replays.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUGraphs


def _trainer(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {
        "accelerator": "hpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "max_epochs": 2,
        "num_sanity_val_steps": 0,
    }
    return Trainer(**{**defaults, **kwargs})


def _loader(rows: int = 40, batch_size: int = 16) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 16, generator=generator)
    return DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=batch_size)  # 16, 16, 8 rows


class Classifier(LightningModule):
    """Trains with Lightning's automatic optimization; records each step's loss and keeps each step's batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.losses: list[float] = []
        self.kept: list[torch.Tensor] = []
        self.forward_bodies = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_bodies += 1  # Python side effect: runs at capture and uncaptured, never at replay
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.kept.append(x)
        loss = F.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Validated(Classifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))


@pytest.fixture
def eager_losses(eager_mode: None) -> list[float]:
    """The losses of the same run in the SDK's eager mode, without graphs."""
    model = Classifier()
    _trainer().fit(model, _loader())
    return model.losses


@pytest.mark.emulator_only  # one process switches from eager to lazy mode: the emulator can, a real SDK cannot
def test_fit_with_training_graphs_gives_the_losses_of_eager_mode(
    eager_losses: list[float], request: pytest.FixtureRequest
) -> None:
    # The suite's own mode switch, after the eager run: lazy mode from here until the test ends. (A fixture, not an
    # import of conftest: under xdist another package's conftest module may be the one named "conftest".)
    request.getfixturevalue("lazy_mode")
    model = Validated()
    trainer = _trainer(callbacks=[HPUGraphs(stages=("fit",))])
    trainer.fit(model, _loader(), _loader(rows=8, batch_size=8))
    assert len(model.losses) == len(eager_losses) == 6
    torch.testing.assert_close(model.losses, eager_losses)
    # Two training shapes (16 and 8 rows) captured once each; validation (8 rows, twice) ran the plain forward.
    assert model.forward_bodies == 2 + 2
    assert "forward" not in model.__dict__ and "orig_forward" not in model.__dict__  # restored after fit


@pytest.mark.usefixtures("lazy_mode")
def test_fit_with_training_graphs_gives_the_losses_of_a_run_without_graphs() -> None:
    reference = Validated()
    _trainer().fit(reference, _loader(), _loader(rows=8, batch_size=8))
    model = Validated()
    callback = HPUGraphs(stages=("fit", "validate"), max_graphs=4)
    _trainer(callbacks=[callback]).fit(model, _loader(), _loader(rows=8, batch_size=8))
    torch.testing.assert_close(model.losses, reference.losses)
    # Two training captures; each validation run (inference graphs over the training wrap) captures its one shape.
    assert model.forward_bodies == 2 + 2
    assert callback.cacher is None and "forward" not in model.__dict__


@pytest.mark.usefixtures("lazy_mode")
def test_training_graphs_leave_the_batches_a_step_kept_alone() -> None:
    # The SDK copies each new batch into the capturing call's tensors; the callback hands the graphs copies.
    model = Classifier()
    _trainer(callbacks=[HPUGraphs(stages=("fit",))]).fit(model, _loader())
    expected = [x for x, _ in _loader()] * 2
    for kept, batch in zip(model.kept, expected, strict=True):
        torch.testing.assert_close(kept.cpu(), batch)


@pytest.mark.usefixtures("lazy_mode")
def test_training_graphs_pass_allow_unused_input_to_the_sdk() -> None:
    class WithUnused(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.unused = torch.nn.Parameter(torch.ones(2))

    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        _trainer(callbacks=[HPUGraphs(stages=("fit",))]).fit(WithUnused(), _loader())
    model = WithUnused()
    _trainer(callbacks=[HPUGraphs(stages=("fit",), allow_unused_input=True)]).fit(model, _loader())
    assert len(model.losses) == 6


@pytest.mark.usefixtures("lazy_mode")
def test_training_graphs_refuse_a_forward_with_var_positional_arguments() -> None:
    class Star(Classifier):
        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.net(inputs[0])

    with pytest.raises(ConfigurationError, match=r"HPUGraphs\(stages=\('fit',\)\).*Star\.forward takes \*args"):
        _trainer(callbacks=[HPUGraphs(stages=("fit",))]).fit(Star(), _loader())


@pytest.mark.usefixtures("eager_mode")
def test_training_graphs_are_refused_in_eager_mode_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"HPUGraphs\(stages=\('fit',\)\) needs the SDK's lazy mode.*"):
        _trainer(callbacks=[HPUGraphs(stages=("fit",))]).fit(Classifier(), _loader())
    with pytest.raises(ConfigurationError, match="PT_HPU_LAZY_MODE=1"):
        _trainer(callbacks=[HPUGraphs(stages=("fit",))]).fit(Classifier(), _loader())


@pytest.mark.usefixtures("lazy_mode")
def test_training_graphs_accumulate_gradients_as_a_run_without_graphs() -> None:
    # The first micro-step's graph hands its gradient tensors to .grad; the callback tells the SDK's ModuleCacher
    # each micro-step (have_grad_accumulation, set_iteration_count) so the others accumulate into them.
    reference = Classifier()
    _trainer(accumulate_grad_batches=2).fit(reference, _loader(rows=64))
    model = Classifier()
    _trainer(accumulate_grad_batches=2, callbacks=[HPUGraphs(stages=("fit",))]).fit(model, _loader(rows=64))
    torch.testing.assert_close(model.losses, reference.losses)
    assert model.forward_bodies == 2 and "set_iteration_count" not in model.__dict__


# What the SDK's ModuleCacher sets on the module it wraps (bridge 1.19.0 and the 1.24 period, hpu/graphs.py:1086-1104),
# and what wrap_in_hpu_graph adds (log_statistics from the 1.24 period on).
SDK_MODULE_ATTRIBUTES = (
    "forward",
    "orig_forward",
    "set_iteration_count",
    "is_hpugraph_tracing",
    "capture_start",
    "capture_end",
    "clear_cache",
    "clear_inputs",
    "log_statistics",
)


@pytest.mark.usefixtures("lazy_mode")
def test_after_the_fit_the_module_keeps_nothing_of_the_graphs_and_they_are_freed() -> None:
    class WatchCacher(Callback):
        """Holds the training graphs' cacher weakly, as it was during the fit."""

        def __init__(self, graphs: HPUGraphs) -> None:
            self.graphs = graphs
            self.cacher: weakref.ref[Any] | None = None

        def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
            self.cacher = weakref.ref(self.graphs.cacher)

    graphs = HPUGraphs(stages=("fit", "validate"))
    watch = WatchCacher(graphs)
    model = Validated()
    _trainer(callbacks=[graphs, watch]).fit(model, _loader(), _loader(rows=8, batch_size=8))
    assert model.forward_bodies == 2 + 2  # the graphs were captured and replayed
    left = sorted(set(SDK_MODULE_ATTRIBUTES) & set(model.__dict__))
    assert left == [], f"the SDK's graph attributes left on the module: {left}"
    gc.collect()
    assert watch.cacher is not None and watch.cacher() is None, "the training graphs' cacher is still alive"
