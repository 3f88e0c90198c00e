"""HPUCompileMetrics and CompileMetricsTracker: compilations, recompilations with reasons, CPU fallbacks, per step."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUCompile, HPUCompileMetrics
from lightning_accel.habana.compile_metrics import CompileMetricsTracker

pytestmark = pytest.mark.usefixtures("eager_mode")


class Regressor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(rows: int = 40, batch_size: int = 16) -> DataLoader:
    """``rows`` rows in batches of ``batch_size``: with 40 and 16 the last batch of each epoch has 8 rows."""
    x = torch.randn(rows, 8, generator=torch.Generator().manual_seed(1))
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size)


def _fit(
    tmp_path: Path,
    metrics: HPUCompileMetrics,
    loader: DataLoader,
    epochs: int = 1,
    model: LightningModule | None = None,
    compiled: bool = True,
) -> Path:
    """Fit ``model`` (a Regressor by default), compiled by HPUCompile unless not ``compiled``; the CSV log folder."""
    torch._dynamo.reset()
    logger = CSVLogger(tmp_path, name="run", version=0)
    Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=epochs,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[HPUCompile(), metrics] if compiled else [metrics],
    ).fit(model or Regressor(), loader)
    return Path(logger.log_dir)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_the_trainer_logs_compilations_and_a_shape_change_shows_a_recompilation_with_its_reason(
    tmp_path: Path,
) -> None:
    metrics = HPUCompileMetrics(warmup_steps=10)
    log_dir = _fit(tmp_path, metrics, _loader())  # batches of 16, 16, 8 rows

    steps = [row for row in _rows(log_dir / "metrics.csv") if row.get("compile/graph_compilations")]
    assert len(steps) == 3
    compilations = [float(row["compile/graph_compilations"]) for row in steps]
    assert compilations[0] >= 1 and compilations[1] == 0 and compilations[2] >= 1  # the 8-row batch recompiles
    assert [float(row["compile/recompilations"]) for row in steps] == [0, 0, 1]
    assert float(steps[-1]["compile/graph_compilations_total"]) == sum(compilations)
    assert [float(row["compile/cpu_fallbacks"]) for row in steps] == [0, 0, 0]  # Gaudi has kernels for each operator

    (recompilation,) = metrics.recompilations
    assert recompilation.step == 2
    assert "size mismatch at index 0. expected 16, actual 8" in recompilation.reason
    assert recompilation.input_shapes == ((8, 8), (8, 1))
    (written,) = _rows(log_dir / "recompilations.csv")
    assert written["step"] == "2" and "expected 16, actual 8" in written["reason"]
    assert written["input_shapes"] == "[[8, 8], [8, 1]]"


def test_it_warns_once_when_compilations_keep_happening_after_warm_up(tmp_path: Path) -> None:
    # Batch sizes 16, 8, 4, 2, 1: without automatic dynamic shapes, each new size recompiles.
    x = torch.randn(31, 8)
    sizes = [16, 8, 4, 2, 1]
    batches = [list(range(sum(sizes[:i]), sum(sizes[: i + 1]))) for i in range(len(sizes))]
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_sampler=batches)
    torch._dynamo.config.automatic_dynamic_shapes = False
    try:
        with pytest.warns(UserWarning, match="Compilation keeps happening after the warm-up of 1 steps") as caught:
            _fit(tmp_path, HPUCompileMetrics(warmup_steps=1, patience=2), loader)
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = True
    growth = [w for w in caught if "keeps happening" in str(w.message)]
    assert len(growth) == 1  # once, though steps 3 and 4 compile too
    assert "mark_dynamic" in str(growth[0].message) and "expected 8, actual 4" in str(growth[0].message)


def test_no_warning_when_compiling_stops_after_warm_up(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(tmp_path, HPUCompileMetrics(warmup_steps=1, patience=2), _loader(rows=64), epochs=2)
    assert not [w for w in caught if "keeps happening" in str(w.message)]


def test_in_lazy_mode_each_new_graph_is_logged_as_a_compilation(tmp_path: Path, lazy_mode: None) -> None:
    import habana_frameworks.torch.core as htcore

    assert htcore.is_lazy()  # the module's eager_mode fixture ran first; lazy_mode switched after it
    # Batches of 16, 16, 8 rows, twice; no torch.compile (lazy mode refuses it).
    log_dir = _fit(tmp_path, HPUCompileMetrics(warmup_steps=10), _loader(), epochs=2, compiled=False)

    steps = [row for row in _rows(log_dir / "metrics.csv") if row.get("compile/graph_compilations")]
    compilations = [float(row["compile/graph_compilations"]) for row in steps]
    # The step marks after backward and after the update end lazy mode's graphs: the first step compiles both, the
    # 8-row batch a new forward and backward, and every later step hits the recipe cache.
    assert compilations[0] >= 2 and compilations[1] == 0 and compilations[2] >= 1
    assert compilations[3:] == [0, 0, 0]
    assert [float(row["compile/recompilations"]) for row in steps] == [0] * 6  # no torch.compile in lazy mode


class ClassBalanced(LightningModule):
    """Weights each class by its inverse frequency in the batch: ``torch.bincount`` has no Gaudi kernel."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        weight = 1.0 / torch.bincount(y, minlength=3).clamp(min=1).float()
        return F.cross_entropy(self.net(x), y, weight=weight)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_an_operator_without_a_gaudi_kernel_is_logged_as_a_cpu_fallback_each_step(tmp_path: Path) -> None:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(2))
    loader = DataLoader(TensorDataset(x, torch.arange(64) % 3), batch_size=16)
    metrics = HPUCompileMetrics(warmup_steps=1, patience=2)
    with pytest.warns(UserWarning, match="Compilation keeps happening after the warm-up of 1 steps") as caught:
        log_dir = _fit(tmp_path, metrics, loader, model=ClassBalanced(), compiled=False)

    steps = [row for row in _rows(log_dir / "metrics.csv") if row.get("compile/cpu_fallbacks")]
    assert [float(row["compile/cpu_fallbacks"]) for row in steps] == [1, 1, 1, 1]
    assert float(steps[-1]["compile/cpu_fallbacks_total"]) == 4
    (growth,) = [str(w.message) for w in caught if "keeps happening" in str(w.message)]
    assert "CPU fallbacks (+1; by operator so far: {'aten::bincount': 3})" in growth
    assert "replace those operators" in growth


def test_the_fabric_route_gives_the_same_counters() -> None:
    torch._dynamo.reset()
    fabric = Fabric(accelerator="hpu", devices=1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # Fabric's way: compile, then set up (setup unwraps the compiled module and compiles the wrapped one again).
    compiled, optimizer = fabric.setup(torch.compile(model, backend="hpu_backend"), optimizer)
    tracker = CompileMetricsTracker(warmup_steps=5)
    logged = []
    for rows in (16, 16, 8):
        x = fabric.to_device(torch.randn(rows, 8))
        fabric.backward(compiled(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()
        logged.append(tracker.step(x))
    assert logged[0]["compile/graph_compilations"] >= 1
    assert logged[1]["compile/graph_compilations"] == 0
    assert [entry["compile/recompilations"] for entry in logged] == [0, 0, 1]
    assert tracker.recompilations[0].input_shapes == ((8, 8),)
    assert "expected 16, actual 8" in tracker.recompilations[0].reason
    assert "input shapes: [8, 8]" in str(tracker.recompilations[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup_steps": -1}, r"HPUCompileMetrics\(warmup_steps=-1\): accepted: an int >= 0"),
        ({"warmup_steps": True}, r"HPUCompileMetrics\(warmup_steps=True\): accepted: an int >= 0"),
        ({"patience": 0}, r"HPUCompileMetrics\(patience=0\): accepted: an int >= 1"),
        ({"prefix": None}, r"HPUCompileMetrics\(prefix=None\): accepted: a string"),
    ],
)
def test_bad_arguments_name_the_argument_the_value_and_what_is_accepted(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        HPUCompileMetrics(**kwargs)
    with pytest.raises(ConfigurationError, match=message.replace("HPUCompileMetrics", "CompileMetricsTracker")):
        CompileMetricsTracker(**kwargs)
