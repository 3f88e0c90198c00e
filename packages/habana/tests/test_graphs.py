"""HPU graphs on the emulator: seed 001's examples against eager runs, the cache, and the Lightning switch."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, script_env
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUGraphs, sdk
from lightning_accel.habana.sdk import htcore

# HPU graphs are created in lazy mode only (PT_HPU_LAZY_MODE=1): SDK 1.19 exports the graph APIs in lazy mode only, and
# from the 1.24 period on they are exported in eager mode too but refuse to create a graph there.
pytestmark = pytest.mark.usefixtures("lazy_mode")

BATCH = 32


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _data(batches: int = 40, batch: int = BATCH) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch, 16, generator=generator)
    return TensorDataset(x, x[:, :4].argmax(dim=1))


def _trainer(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = {
        "accelerator": "hpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return Trainer(**{**defaults, **kwargs})


class EagerModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = _net()
        self.automatic_optimization = False
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        x, y = batch
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self(x), y)
        loss.backward()
        optimizer.step()
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class CaptureReplayModel(EagerModel):
    """Seed 001, 'Capture and Replay Training', written against the seam."""

    def __init__(self) -> None:
        super().__init__()
        self.g = htcore.hpu.HPUGraph()
        # As in the seed: placeholders made on the HPU.
        self.static_input = torch.zeros(BATCH, 16, device="hpu")
        self.static_target = torch.zeros(BATCH, dtype=torch.long, device="hpu")
        self.static_loss: torch.Tensor | None = None
        self.forward_bodies = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_bodies += 1  # Python side effect: runs at capture, never at replay
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        data, target = batch
        self.static_input.copy_(data)
        self.static_target.copy_(target)
        if batch_idx == 0 and self.current_epoch == 0:
            optimizer.zero_grad(set_to_none=True)
            with htcore.hpu.graph(self.g):
                static_y_pred = self(self.static_input)
                self.static_loss = F.cross_entropy(static_y_pred, self.static_target)
                self.static_loss.backward()
                optimizer.step()
        else:
            self.g.replay()
        assert self.static_loss is not None
        self.losses.append(self.static_loss.item())
        return self.static_loss


def test_capture_and_replay_training_matches_eager() -> None:
    eager = EagerModel()
    _trainer(max_epochs=2).fit(eager, DataLoader(_data(), batch_size=BATCH))
    graphed = CaptureReplayModel()
    _trainer(max_epochs=2).fit(graphed, DataLoader(_data(), batch_size=BATCH))

    assert len(graphed.losses) == len(eager.losses) == 80
    # The model's Python ran once (the capture); the other 79 steps were the graph replaying on new data, and their
    # losses are the eager ones.
    assert graphed.forward_bodies == 1
    assert graphed.losses == pytest.approx(eager.losses, rel=1e-4)
    assert graphed.losses[-1] < graphed.losses[0]


class CaptureReplayInference(LightningModule):
    """Seed 001, 'Capture and Replay Inference'."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net
        self.g = htcore.hpu.HPUGraph()
        # As in the seed: placeholders made on the HPU.
        self.static_input = torch.zeros(BATCH, 16, device="hpu")
        self.static_target = torch.zeros(BATCH, dtype=torch.long, device="hpu")
        self.static_loss: torch.Tensor | None = None
        self.losses: list[float] = []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.static_input.copy_(x)
        self.static_target.copy_(y)
        if batch_idx == 0:
            with htcore.hpu.graph(self.g):
                static_y_pred = self.net(self.static_input)
                self.static_loss = F.cross_entropy(static_y_pred, self.static_target)
        else:
            self.g.replay()
        assert self.static_loss is not None
        self.losses.append(self.static_loss.item())


def test_capture_and_replay_inference_matches_eager() -> None:
    torch.manual_seed(0)
    net = _net()
    model = CaptureReplayInference(net)
    _trainer().test(model, DataLoader(_data(10), batch_size=BATCH), verbose=False)
    x, y = _data(10).tensors
    with torch.no_grad():
        expected = [F.cross_entropy(net(x[i : i + BATCH]), y[i : i + BATCH]).item() for i in range(0, len(x), BATCH)]
    assert model.losses == pytest.approx(expected, rel=1e-5)


def _train_eager_and(make_graphed: Any, steps: int = 12) -> tuple[list[float], list[float]]:
    losses: list[list[float]] = []
    for graphed in (False, True):
        torch.manual_seed(0)
        net = _net()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        if graphed:
            net = make_graphed(net)
        x, y = _data(steps).tensors
        run = []
        for i in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x[i * BATCH : (i + 1) * BATCH]), y[i * BATCH : (i + 1) * BATCH])
            loss.backward()
            optimizer.step()
            run.append(loss.item())
        losses.append(run)
    return losses[0], losses[1]


def test_make_graphed_callables_trains_like_eager() -> None:
    eager, graphed = _train_eager_and(lambda net: htcore.hpu.make_graphed_callables(net, (torch.randn(BATCH, 16),)))
    assert graphed == pytest.approx(eager, rel=1e-5)


def test_module_cacher_runs_eager_outside_training() -> None:
    net = _net()
    cacher = htcore.hpu.ModuleCacher(max_graphs=2)
    cacher(model=net, inplace=True)
    net.eval()
    net(torch.randn(3, 16))
    assert len(cacher.model_dict) == 0
    assert cacher.uncached_eval_hits == 1


class DynamicControlFlow(LightningModule):
    """Seed 001, 'Dynamic Control Flow': separate graphs per branch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.module1 = _net()
        self.module2 = torch.nn.Identity()
        self.module3 = torch.nn.ReLU()
        self.automatic_optimization = False
        self.losses: list[float] = []

    def graph_modules(self) -> None:
        for module in (self.module1, self.module2, self.module3):
            htcore.hpu.ModuleCacher(max_graphs=4)(model=module, inplace=True)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        data, target = batch
        optimizer.zero_grad(set_to_none=True)
        tmp = self.module1(data)
        tmp = self.module2(tmp) if random.random() > 0.5 else self.module3(tmp)
        loss = F.cross_entropy(tmp, target)
        loss.backward()
        optimizer.step()
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DynamicOps(DynamicControlFlow):
    """Seed 001, 'Dynamic Ops': the data-dependent op runs between two graphed modules."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        data, target = batch
        optimizer.zero_grad(set_to_none=True)
        tmp = self.module1(data)
        htcore.mark_step()
        keep = torch.where(tmp.detach().amax(dim=1) > 0)[0]  # dynamic: how many rows survive depends on the data
        htcore.mark_step()
        tmp = self.module3(tmp[keep])
        loss = F.cross_entropy(tmp, target[keep])
        loss.backward()
        optimizer.step()
        self.losses.append(loss.item())
        return loss


@pytest.mark.parametrize("model_class", [DynamicControlFlow, DynamicOps])
def test_dynamic_control_flow_and_dynamic_ops_match_eager(model_class: type[DynamicControlFlow]) -> None:
    runs = []
    for graphed in (False, True):
        random.seed(0)
        model = model_class()
        if graphed:
            model.graph_modules()
        _trainer(max_epochs=1, limit_train_batches=10).fit(model, DataLoader(_data(10), batch_size=BATCH))
        runs.append(model.losses)
    assert runs[1] == pytest.approx(runs[0], rel=1e-5)


def test_replaying_a_dynamic_op_is_a_clear_error() -> None:
    g = htcore.hpu.HPUGraph()
    static = torch.tensor([1.0, -1.0, 2.0])
    with htcore.hpu.graph(g):
        torch.nonzero(static > 0)
    static.copy_(torch.tensor([1.0, 1.0, 1.0]))
    with pytest.raises(RuntimeError, match="dynamic ops"):
        g.replay()


def test_captured_control_flow_is_frozen() -> None:
    g = htcore.hpu.HPUGraph()
    x = torch.tensor([1.0])
    with htcore.hpu.graph(g):
        out = x * 2 if x.item() > 0 else x * -100
    x.fill_(-3.0)
    g.replay()
    assert out.item() == -6.0  # the branch taken at capture, on the new data


class Predictor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = _net()
        self.forward_bodies = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_bodies += 1  # Python side effect: runs at capture, not at replay
        return self.net(x)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def test_hpu_graphs_callback_wraps_prediction_without_code_changes() -> None:
    data = DataLoader(_data(5, 10), batch_size=16)  # 50 rows: three batches of 16 and one of 2
    eager_model = Predictor()
    eager = _trainer().predict(eager_model, data)
    graphed_model = Predictor()
    graphed = _trainer(callbacks=[HPUGraphs()]).predict(graphed_model, data)
    assert eager is not None and graphed is not None
    for expected, got in zip(eager, graphed, strict=True):
        torch.testing.assert_close(got, expected)
    assert eager_model.forward_bodies == 4
    assert graphed_model.forward_bodies == 2  # one capture per input shape, replays for the rest
    assert "forward" not in graphed_model.__dict__  # restored after the stage


def test_a_kept_batch_0_holds_the_last_batch_on_gaudi_but_not_under_the_callback() -> None:
    # What Gaudi does: wrap_in_hpu_graph keeps the capturing call's input tensors as the graph's inputs and copies
    # every later batch of that shape into them (bridge 1.19.0 hpu/graphs.py:615, :644).
    module = htcore.hpu.wrap_in_hpu_graph(_net().eval())
    batches = [x for x, _ in DataLoader(_data(3, 4), batch_size=4)]
    originals = [b.clone() for b in batches]
    with torch.no_grad():
        for batch in batches:
            module(batch)
    torch.testing.assert_close(batches[0], originals[-1])

    # The callback hands the graphs copies: the batches a predict_step keeps stay its own.
    class Keeping(Predictor):
        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return batch[0], self(batch[0])

    data = DataLoader(_data(3, 4), batch_size=4)
    predictions = _trainer(callbacks=[HPUGraphs()]).predict(Keeping(), data)
    assert predictions is not None
    for (kept, _), (x, _) in zip(predictions, data, strict=True):
        torch.testing.assert_close(kept.cpu(), x)


def test_hpu_graphs_callback_restores_the_forward_when_prediction_fails() -> None:
    class Failing(Predictor):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                raise RuntimeError("bad batch")
            return super().predict_step(batch, batch_idx)

    model = Failing()
    with pytest.raises(RuntimeError, match="bad batch"):
        _trainer(callbacks=[HPUGraphs()]).predict(model, DataLoader(_data(5, 10), batch_size=16))
    assert "forward" not in model.__dict__ and "hpu_graph_cache" not in model.__dict__


def test_hpu_graphs_callback_arguments_and_compiled_models_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"stages=\('train',\)"):
        HPUGraphs(stages=("train",))
    with pytest.raises(ConfigurationError, match=r"allow_unused_input=1"):
        HPUGraphs(stages=("fit",), allow_unused_input=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"max_graphs=0"):
        HPUGraphs(max_graphs=0)
    compiled = torch.compile(Predictor())
    with pytest.raises(ConfigurationError, match="cannot be combined"):
        _trainer(callbacks=[HPUGraphs()]).predict(compiled, DataLoader(_data(1, 4), batch_size=4))


def test_hpu_graphs_callback_refuses_eager_mode_before_the_run_though_the_graph_apis_exist(
    request: pytest.FixtureRequest,
) -> None:
    request.getfixturevalue("eager_mode")  # after the module's lazy mode: eager for this test
    if sdk.is_emulated():
        # The emulated SDK is the 1.24 period's: its graph names exist in eager mode, so the callback cannot (and does
        # not) tell the mode from them; it asks the SDK's is_lazy().
        assert callable(htcore.hpu.wrap_in_hpu_graph) and callable(htcore.hpu.ModuleCacher)
    model = Predictor()
    with pytest.raises(
        ConfigurationError,
        match=r"HPUGraphs\(stages=\('validate', 'test', 'predict'\)\) needs the SDK's lazy mode: .*PT_HPU_LAZY_MODE=1",
    ):
        _trainer(callbacks=[HPUGraphs()]).predict(model, DataLoader(_data(1, 4), batch_size=4))
    assert model.forward_bodies == 0 and "forward" not in model.__dict__  # refused before the first batch


def test_graphs_refuse_compiled_modules() -> None:
    compiled = torch.compile(_net())
    with pytest.raises(RuntimeError, match=r"cannot be combined with torch\.compile"):
        htcore.hpu.wrap_in_hpu_graph(compiled)
    with pytest.raises(RuntimeError, match=r"cannot be combined with torch\.compile"):
        htcore.hpu.ModuleCacher(2)(model=compiled)


def test_wrap_in_hpu_graph_test_matches_eager() -> None:
    """Seed 001, 'wrap_in_hpu_graph': trainer.test on a wrapped model."""

    class Tester(Predictor):
        def __init__(self) -> None:
            super().__init__()
            self.accuracies: list[float] = []

        def test_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.accuracies.append((self(x).argmax(dim=1) == y).float().mean().item())

    data = DataLoader(_data(4), batch_size=BATCH)
    eager = Tester()
    _trainer().test(eager, data, verbose=False)
    wrapped = htcore.hpu.wrap_in_hpu_graph(Tester(), asynchronous=False, disable_tensor_cache=True)
    _trainer().test(wrapped, data, verbose=False)
    assert wrapped.accuracies == eager.accuracies
    assert wrapped.forward_bodies == 1


def test_seed_example_runs_with_the_sdk_module_names_and_hpu_placeholders(tmp_path: Path) -> None:
    # examples/habana/hpu_graphs.py is seed 001 as a user runs it: `import habana_frameworks.torch.core as htcore`,
    # placeholders made with device="hpu", PT_HPU_LAZY_MODE=1 before the SDK loads.
    example = Path(__file__).resolve().parents[3] / "examples" / "habana" / "hpu_graphs.py"
    env = script_env(PT_HPU_LAZY_MODE="1")
    process = subprocess.run([PYTHON, str(example)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stderr[-3000:]
    accuracy = float(process.stdout.rsplit("accuracy with graphed prediction:", 1)[1].split()[0])
    assert accuracy > 0.8


def test_module_cacher_first_call_runs_the_forward_once() -> None:
    # The capture computes the first call's result: running the forward again would draw new dropout masks.
    losses = []
    for graphed in (False, True):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 4)).to("hpu")
        if graphed:
            htcore.hpu.ModuleCacher(max_graphs=2)(model=net, inplace=True)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        data = _data(4)
        run = []
        for step in range(4):
            x, y = (
                data.tensors[0][step * BATCH : (step + 1) * BATCH],
                data.tensors[1][step * BATCH : (step + 1) * BATCH],
            )
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x.to("hpu")), y.to("hpu"))
            loss.backward()
            optimizer.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_replay_before_any_capture_only_marks_a_step_and_during_capture_is_refused() -> None:
    from lightning_accel.habana_emulator import core as emulated_core

    g = htcore.hpu.HPUGraph()
    before = emulated_core._marked_steps()
    g.replay()  # the SDK's HPUGraph::replay: a step marker, then the captured graphs (none yet)
    assert emulated_core._marked_steps() == before + 1

    static = torch.ones(4, device="hpu")
    g.capture_begin()
    out = static * 2
    with pytest.raises(RuntimeError, match="GRAPH:: Capture in progress"):
        g.replay()
    g.capture_end()
    static.fill_(3.0)
    g.replay()
    assert out.cpu().tolist() == [6.0] * 4


def _hpu_step_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers = (torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Dropout(0.3))
    net = torch.nn.Sequential(*layers, torch.nn.Linear(32, 4)).to("hpu")
    return net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def test_replayed_training_steps_with_dropout_and_batch_norm_equal_eager_steps() -> None:
    # Each replay draws new dropout masks from the generator (as the eager step does after the same seed), updates
    # the BatchNorm running statistics in place, and runs the optimizer's momentum update on the captured memory.
    batches = [(torch.randn(BATCH, 16), torch.randint(0, 4, (BATCH,))) for _ in range(5)]
    eager, eager_optimizer = _hpu_step_model()
    graphed, optimizer = _hpu_step_model()
    # One eager step first on both, as before a CUDA graph capture: the optimizer's first step creates its momentum
    # buffers (a branch a capture would freeze).
    x, y = batches.pop(0)
    for model, opt in ((eager, eager_optimizer), (graphed, optimizer)):
        torch.manual_seed(99)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x.to("hpu")), y.to("hpu")).backward()
        opt.step()
    static_x = torch.zeros(BATCH, 16, device="hpu")
    static_y = torch.zeros(BATCH, dtype=torch.long, device="hpu")
    g = htcore.hpu.HPUGraph()
    static_loss = None
    for step, (x, y) in enumerate(batches):
        torch.manual_seed(100 + step)
        eager_optimizer.zero_grad(set_to_none=True)
        expected = F.cross_entropy(eager(x.to("hpu")), y.to("hpu"))
        expected.backward()
        eager_optimizer.step()

        static_x.copy_(x)
        static_y.copy_(y)
        torch.manual_seed(100 + step)
        if step == 0:
            optimizer.zero_grad(set_to_none=True)
            with htcore.hpu.graph(g):
                static_loss = F.cross_entropy(graphed(static_x), static_y)
                static_loss.backward()
                optimizer.step()
        else:
            g.replay()
        assert static_loss is not None
        torch.testing.assert_close(static_loss.cpu(), expected.cpu(), rtol=1e-5, atol=1e-6)
    for got, want in zip(graphed.state_dict().values(), eager.state_dict().values(), strict=True):
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-6)
    assert graphed[1].num_batches_tracked.item() == 1 + len(batches)  # the eager step, the capture, the replays


def test_views_made_in_the_capture_follow_the_replayed_data() -> None:
    static = torch.zeros(4, 3, device="hpu")
    g = htcore.hpu.HPUGraph()
    with htcore.hpu.graph(g):
        doubled = static * 2
        column = doubled.t()[1]  # a view of a view of a result
        total = column.sum()  # reads the view
        flat = doubled.reshape(-1)  # a view, no new memory
    static.copy_(torch.arange(12.0).reshape(4, 3))
    g.replay()
    expected = torch.arange(12.0).reshape(4, 3) * 2
    assert column.cpu().tolist() == expected[:, 1].tolist()
    assert total.item() == expected[:, 1].sum().item()
    assert flat.cpu().tolist() == expected.reshape(-1).tolist()


@pytest.mark.emulator_only
def test_a_replay_runs_without_a_dispatch_mode() -> None:
    net, optimizer = _hpu_step_model()
    static_x = torch.randn(BATCH, 16, device="hpu")
    static_y = torch.randint(0, 4, (BATCH,), device="hpu")
    g = htcore.hpu.HPUGraph()
    optimizer.zero_grad(set_to_none=True)
    with htcore.hpu.graph(g):
        loss = F.cross_entropy(net(static_x), static_y)
        loss.backward()
        optimizer.step()
    weight = net[0].weight.detach().cpu()
    g.replay()
    # The replay ran on host views of the captured memory: the HPU weights moved.
    assert not torch.equal(net[0].weight.detach().cpu(), weight)
