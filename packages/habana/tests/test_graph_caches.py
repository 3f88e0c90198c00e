"""The SDK's HPU-graph caches on the emulator: at most ``max_graphs`` graphs, later shapes run uncaptured, none evicted.

Source: gaudi-pytorch-bridge 1.19.0, ``habana_frameworks/torch/hpu/graphs.py``: ``wrapped_hpugraph_forward`` runs the
original forward for a new input once ``len(cache) == max_graphs``; ``ModuleCacher.forward`` inserts a graph only while
``len(self.model_dict) < self.max_graphs`` and otherwise counts an uncached train hit. A captured graph replays
without running the module's Python, so a counter in ``forward`` tells captured calls from uncaptured ones.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUGraphs
from lightning_accel.habana.sdk import htcore

# HPU graphs are created in lazy mode only (PT_HPU_LAZY_MODE=1); SDK 1.24 exports the names in eager mode too.
pytestmark = pytest.mark.usefixtures("lazy_mode")


class Counting(torch.nn.Module):
    """A small net whose forward counts the times its Python runs (at capture and uncaptured, never at replay)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.bodies = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.bodies += 1
        return self.net(x)


def _twin(module: Counting) -> Counting:
    twin = Counting()
    twin.load_state_dict(module.state_dict())
    return twin


def test_wrap_in_hpu_graph_runs_shapes_beyond_max_graphs_uncaptured_and_correct() -> None:
    module = Counting().eval()
    eager = _twin(module).eval()
    htcore.hpu.wrap_in_hpu_graph(module, max_graphs=2)
    assert callable(module.clear_inputs) and callable(module.clear_cache)
    assert "hpu_graph_cache" not in module.__dict__  # not an SDK attribute
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for rows in (2, 3, 5, 2, 3, 5, 5):  # 5 is the third shape: beyond max_graphs=2
            x = torch.randn(rows, 16, generator=generator)
            torch.testing.assert_close(module(x), eager(x))
        # Two captures, then the third shape's three calls ran the Python forward; the graphs of 2 and 3 replayed.
        assert module.bodies == 2 + 3
        first, second = module(torch.ones(5, 16)), module(torch.zeros(5, 16))
        # An uncaptured call returns its own tensor; a replay would refill the graph's static output.
        assert first is not second
        torch.testing.assert_close(first, eager(torch.ones(5, 16)))
        # Nothing was evicted: the first shape still replays.
        before = module.bodies
        torch.testing.assert_close(module(torch.ones(2, 16)), eager(torch.ones(2, 16)))
        assert module.bodies == before
        module.clear_inputs()
        module.clear_cache()  # the graphs are gone: the next call of a known shape captures again
        module(torch.ones(2, 16))
        assert module.bodies == before + 1


def test_module_cacher_trains_shapes_beyond_max_graphs_uncaptured_like_eager() -> None:
    module = Counting()
    reference = _twin(module)
    cacher = htcore.hpu.ModuleCacher(max_graphs=2)
    assert cacher(model=module, inplace=True) is module
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(2)
    sizes = [4, 8, 16, 4, 16, 8]  # 16 is the third shape: beyond max_graphs=2
    for size in sizes:
        x = torch.randn(size, 16, generator=generator)
        y = torch.randint(0, 4, (size,), generator=generator)
        for net, opt in ((module, optimizer), (reference, reference_optimizer)):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        for param, expected in zip(module.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(param, expected)
    assert len(cacher.model_dict) == 2
    assert cacher.uncached_train_hits == 2  # both steps of batch size 16
    assert sum(cacher.cached_hits_dict.values()) == 4
    assert module.bodies == 2 + 2  # two captures, two uncaptured forwards; the 4 and 8 repeats replayed
    assert not hasattr(cacher, "clear_cache")  # the SDK's ModuleCacher has no way to drop its graphs


def test_hpu_graphs_callback_predicts_shapes_beyond_max_graphs_correctly() -> None:
    from lightning.pytorch import LightningModule, Trainer

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Counting()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
            return self(batch[0])

    model = Model()
    eager = _twin(model.inner).eval()
    x = torch.randn(14, 16, generator=torch.Generator().manual_seed(3))
    # Two loaders in one prediction: batches of 4, 3, 4, 3 rows. With max_graphs=1 the 4-row shape is captured, the
    # 3-row batches run uncaptured.
    loaders = [DataLoader(TensorDataset(x[:7]), batch_size=4), DataLoader(TensorDataset(x[7:]), batch_size=4)]
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[HPUGraphs(stages=("predict",), max_graphs=1)],
    )
    predictions = trainer.predict(model, loaders)
    assert predictions is not None
    with torch.no_grad():
        torch.testing.assert_close(torch.cat([p.cpu() for loader in predictions for p in loader]), eager(x))
    assert model.inner.bodies == 3  # one capture (4 rows, replayed once), two uncaptured calls (3 rows)
    left = {"forward", "clear_inputs", "clear_cache", "log_statistics"} & set(model.__dict__)
    assert not left, f"the SDK's graph attributes left on the module: {left}"
