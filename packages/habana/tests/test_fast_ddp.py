"""fast_ddp (optimum-habana's gradient all-reduce without DDP's reducer) on two real processes over emulated HCCL."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, TwoRankRuns, free_port, same_tensors, script_env

from lightning_accel.core.errors import ConfigurationError

SCRIPT = SCRIPTS / "fast_ddp_fit.py"
_CAPTURED = "fast_ddp: packing and unpacking 4 gradients (4810 elements, torch.float32) captured as 2 HPU graphs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRankRuns:
    return TwoRankRuns(SCRIPT, tmp_path_factory.mktemp("fast_ddp"))


def _assert_grads_close(fast: dict[str, Any], ddp: dict[str, Any]) -> None:
    # Averaged in float32 as DDP's reducer averages: the same gradients at every weight update.
    assert len(fast["grads"]) == len(ddp["grads"])
    for fast_grads, ddp_grads in zip(fast["grads"], ddp["grads"], strict=True):
        for name, grad in ddp_grads.items():
            torch.testing.assert_close(fast_grads[name], grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("accumulate", "lazy"), [(1, "0"), (2, "0"), (1, "1")], ids=["every-step", "accumulating", "lazy-mode"]
)
def test_fast_ddp_trains_in_lockstep_to_ddps_weights_without_a_reducer(
    runs: TwoRankRuns, accumulate: int, lazy: str
) -> None:
    # Eager mode (the SDK's default) and lazy mode (optimum-habana's default, where the all-reduce joins the graph).
    ddp, _ = runs("--strategy", "ddp", "--accumulate", str(accumulate), lazy=lazy)
    fast, stderr = runs("--strategy", "fast_ddp", "--accumulate", str(accumulate), lazy=lazy)
    assert [r["wrapped_in_ddp"] for r in ddp] == [True, True]
    assert [(r["wrapped_in_ddp"], r["reducer"]) for r in fast] == [(False, False)] * 2  # no DDP, no reducer
    # One all-reduce per weight update (6 batches), none inside gradient accumulation.
    assert [r["reductions"] for r in fast] == [6 // accumulate] * 2
    assert [r["global_step"] for r in fast] == [r["global_step"] for r in ddp] == [6 // accumulate] * 2
    # By default HPU graphs in lazy mode, where the strategy says it captured them; ordinary operations in eager mode.
    assert [r["hpu_graphs"] for r in fast] == [lazy == "1"] * 2
    assert (_CAPTURED in stderr) is (lazy == "1")
    assert "HPUFastDDPStrategy(use_hpu_graphs" not in stderr  # nothing to warn about: graphs were not asked for
    # Each rank built other weights; rank 0's reached both before training, as DDP broadcasts them.
    assert same_tensors(fast[0]["start"], fast[1]["start"])
    assert same_tensors(fast[0]["start"], ddp[0]["start"])
    for rank in range(2):
        _assert_grads_close(fast[rank], ddp[rank])
        for name, weight in ddp[rank]["state_dict"].items():
            torch.testing.assert_close(fast[rank]["state_dict"][name], weight, rtol=1e-5, atol=1e-6)
    assert same_tensors(fast[0]["state_dict"], fast[1]["state_dict"])  # the ranks never drift apart
    assert not same_tensors(fast[0]["state_dict"], fast[0]["start"])  # and they trained


@pytest.mark.parametrize(
    ("accumulate", "zero_grad"),
    [(1, "none"), (2, "none"), (1, "zeros")],
    ids=["set-to-none", "accumulating-set-to-none", "zeroed-in-place"],
)
def test_hpu_graphs_capture_once_replay_after_and_reduce_as_ddp_and_eager_fast_ddp(
    runs: TwoRankRuns, accumulate: int, zero_grad: str
) -> None:
    steps = ("--accumulate", str(accumulate))
    ddp, _ = runs("--strategy", "ddp", *steps, lazy="1")
    eager, _ = runs("--strategy", "fast_ddp", "--no-graphs", *steps, lazy="1")
    # HPU graphs are the default; Lightning's zero_grad sets gradients to None unless told otherwise.
    zeroed = () if zero_grad == "none" else ("--zero-grad", zero_grad)
    graphs, stderr = runs("--strategy", "fast_ddp", *steps, *zeroed, lazy="1")
    updates = 6 // accumulate
    for rank in range(2):
        run = graphs[rank]
        assert (run["hpu_graphs"], run["reductions"]) == (True, updates)
        # Captured at the first update (which the captures ran), replayed at each later one: two graphs each time.
        assert (run["graph_captures"], run["graph_replays"]) == (2, 2 * (updates - 1))
        # Counted again where the SDK sees it: its HPUGraph was asked for 2 captures and those replays, no more.
        assert run["sdk_graph_calls"] == {"capture_begin": 2, "replay": 2 * (updates - 1)}
        # Lightning's zero_grad set the gradients to None before each update's first backward pass (or zeroed them
        # in place): either way the backward pass wrote into the captured tensors, so nothing had to be copied.
        assert run["gradient_copies"] == 0
        assert (eager[rank]["hpu_graphs"], eager[rank]["graph_captures"]) == (False, 0)
        # The same operations as the eager packing, replayed: bit for bit its gradients and weights, and DDP's.
        assert len(run["grads"]) == len(eager[rank]["grads"]) == updates
        for with_graphs, without in zip(run["grads"], eager[rank]["grads"], strict=True):
            assert same_tensors(with_graphs, without)
        assert same_tensors(run["state_dict"], eager[rank]["state_dict"])
        _assert_grads_close(run, ddp[rank])
    assert _CAPTURED in stderr
    assert same_tensors(graphs[0]["state_dict"], graphs[1]["state_dict"])


def test_a_bfloat16_buffer_rounds_the_averaged_gradients_as_optimum_habana_does(runs: TwoRankRuns) -> None:
    ddp, _ = runs("--strategy", "ddp")
    fast, _ = runs("--strategy", "fast_ddp", "--buffer-dtype", "bfloat16")
    assert same_tensors(fast[0]["state_dict"], fast[1]["state_dict"])
    first_fast, first_ddp = fast[0]["grads"][0], ddp[0]["grads"][0]
    for name, grad in first_ddp.items():
        # Each gradient went through bfloat16: exactly representable there, and within its rounding of DDP's.
        assert torch.equal(first_fast[name], first_fast[name].bfloat16().float()), name
        torch.testing.assert_close(first_fast[name], grad, rtol=2e-2, atol=1e-4)


def test_ddps_own_arguments_and_other_buffer_dtypes_are_refused() -> None:
    from lightning_accel.habana import HPUFastDDPStrategy

    with pytest.raises(ConfigurationError, match=r"find_unused_parameters not accepted: these are arguments of Dist"):
        HPUFastDDPStrategy(find_unused_parameters=True)
    with pytest.raises(ConfigurationError, match=r"buffer_dtype=torch.float16\) is not accepted. Accepted: torch.fl"):
        HPUFastDDPStrategy(buffer_dtype=torch.float16)


def _one_process_world_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    # No process group: the collectives answer as a world of two whose other rank adds 1 to every element of the
    # buffer. The sums then depend on this rank's gradients, so a stale or skipped copy shows.
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, group=None: tensor.add_(1.0))


def _twins() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to("hpu")
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to("hpu")
    twin.load_state_dict(model.state_dict())
    return model, twin


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "hpu-graphs"])
def test_a_parameter_whose_gradient_comes_and_goes_is_refused(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch, graphs: bool
) -> None:
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    _one_process_world_of_two(monkeypatch)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)).to("hpu")
    fusion = GradientFusion(model, use_hpu_graphs=graphs)
    x = torch.ones(1, 3, device="hpu")
    model[1](x).sum().backward()  # only the second layer has gradients
    fusion.all_reduce()
    assert fusion.graph_captures == (2 if graphs else 0)
    model(x).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameter '0.weight' has a gradient now but had none at the first step"):
        fusion.all_reduce()


def test_with_hpu_graphs_a_gradient_set_to_none_gets_its_captured_tensor_back_zeroed(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    _one_process_world_of_two(monkeypatch)
    model, twin = _twins()
    fusion, eager = GradientFusion(model), GradientFusion(twin, use_hpu_graphs=False)
    captured: list[torch.Tensor] = []
    for step in range(4):
        for _ in range(2):  # two backward passes per update: gradients accumulate into the captured tensors
            fusion.prepare_backward()
            x = torch.randn(5, 3, device="hpu")
            model(x).pow(2).sum().backward()
            twin(x).pow(2).sum().backward()
        fusion.all_reduce()
        eager.all_reduce()
        # Each update's gradients (not the first update's, replayed) went through the buffer as without graphs.
        assert same_tensors(_grads(model), _grads(twin)), step
        if step == 0:
            captured = [p.grad for p in model.parameters()]  # type: ignore[misc]
        assert all(p.grad is g for p, g in zip(model.parameters(), captured, strict=True))
        model.zero_grad(set_to_none=True)  # torch's and Lightning's default
        twin.zero_grad(set_to_none=True)
        assert all(p.grad is None for p in model.parameters())
    assert (fusion.reductions, fusion.graph_captures, fusion.graph_replays) == (4, 2, 6)
    assert fusion.gradient_copies == 0


def test_with_hpu_graphs_new_gradient_tensors_are_copied_into_the_captured_ones_and_said_once(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    _one_process_world_of_two(monkeypatch)
    model, twin = _twins()
    fusion, eager = GradientFusion(model), GradientFusion(twin, use_hpu_graphs=False)
    for step in range(3):
        # No prepare_backward: after zero_grad(set_to_none=True) the backward pass makes new gradient tensors.
        model.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
        x = torch.randn(5, 3, device="hpu")
        model(x).pow(2).sum().backward()
        twin(x).pow(2).sum().backward()
        if step == 1:
            with pytest.warns(UserWarning, match=r"gradient of parameter '0.weight' is a new tensor, not the one"):
                fusion.all_reduce()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # said once, at the first copy
                fusion.all_reduce()
        eager.all_reduce()
        assert same_tensors(_grads(model), _grads(twin)), step
    assert (fusion.graph_captures, fusion.graph_replays, fusion.gradient_copies) == (2, 4, 8)


def test_with_hpu_graphs_a_parameter_the_backward_pass_leaves_out_is_refused(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    _one_process_world_of_two(monkeypatch)
    model, _ = _twins()
    fusion = GradientFusion(model)
    x = torch.ones(1, 3, device="hpu")
    model(x).sum().backward()
    fusion.all_reduce()
    model.zero_grad(set_to_none=True)
    fusion.prepare_backward()  # every gradient is back, zeroed, so "None" can no longer say "unused"
    model[2](torch.ones(1, 4, device="hpu")).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameter '0.weight' got no gradient in this weight update but had one"):
        fusion.all_reduce()


def test_hpu_graphs_are_refused_by_name_where_they_cannot_be_captured(
    eager_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.habana import HPUFastDDPStrategy
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    _one_process_world_of_two(monkeypatch)
    model = torch.nn.Linear(3, 1).to("hpu")
    model(torch.ones(1, 3, device="hpu")).sum().backward()
    with pytest.raises(ConfigurationError, match=r"use_hpu_graphs=True\): the SDK runs in eager mode \(PT_HPU_LAZY"):
        GradientFusion(model, use_hpu_graphs=True).all_reduce()
    assert GradientFusion(model).use_hpu_graphs is False  # by default, graphs in lazy mode only
    cpu = torch.nn.Linear(3, 1)
    cpu(torch.ones(1, 3)).sum().backward()
    with pytest.raises(ConfigurationError, match=r"use_hpu_graphs=True\): gradients on cpu, and HPU graphs capture"):
        GradientFusion(cpu, use_hpu_graphs=True).all_reduce()
    # The strategy refuses graphs in eager mode at set-up, before its first collective.
    strategy = HPUFastDDPStrategy(use_hpu_graphs=True)
    strategy.model = model
    with pytest.raises(ConfigurationError) as refused:
        strategy.configure_ddp()
    assert str(refused.value).startswith(
        "HPUFastDDPStrategy(use_hpu_graphs=True): the SDK runs in eager mode (PT_HPU_LAZY_MODE=0 or unset, the default "
        "since SDK 1.21), and HPU graphs are created in lazy mode only. Set PT_HPU_LAZY_MODE=1"
    )
    GradientFusion(cpu, use_hpu_graphs=False).all_reduce()  # without graphs, any device
    with pytest.raises(ConfigurationError, match=r"GradientFusion\(use_hpu_graphs=1\) is not accepted. Accepted: True"):
        GradientFusion(cpu, use_hpu_graphs=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"Strategy\(use_hpu_graphs='yes'\) is not accepted. Accepted: True"):
        HPUFastDDPStrategy(use_hpu_graphs="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_the_importer_maps_optimum_habanas_fast_ddp_to_the_strategy(
    request: pytest.FixtureRequest, tmp_path: Path, lazy: bool
) -> None:
    from lightning.pytorch import Trainer

    from lightning_accel.habana import HPUFastDDPStrategy
    from lightning_accel.habana.optimum import import_optimum_habana

    request.getfixturevalue("lazy_mode" if lazy else "eager_mode")
    arguments = {"distribution_strategy": "fast_ddp", "ddp_timeout": 60, "use_lazy_mode": lazy, "report_to": "none"}
    run = import_optimum_habana(None, {**arguments, "output_dir": str(tmp_path)})
    strategy = Trainer(**run.trainer_kwargs(devices=2)).strategy
    assert isinstance(strategy, HPUFastDDPStrategy)
    assert strategy.buffer_dtype == torch.bfloat16  # optimum-habana's buffer
    assert strategy._timeout.total_seconds() == 60
    # optimum-habana's trainer always packs with HPU graphs; they exist in lazy mode only.
    assert strategy.use_hpu_graphs is lazy


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"ddp_find_unused_parameters": True, "ddp_bucket_cap_mb": 50},
            "training_args: ddp_find_unused_parameters, ddp_bucket_cap_mb with distribution_strategy='fast_ddp': these "
            "steer DDP's reducer, which fast_ddp does not build",
        ),
        (
            {"fsdp": "full_shard"},
            "training_args: distribution_strategy='fast_ddp' with fsdp: fast_ddp averages whole gradients",
        ),
        (
            {"deepspeed": {"zero_optimization": {"stage": 2}}},
            "training_args: distribution_strategy='fast_ddp' with deepspeed",
        ),
    ],
    ids=["ddp-fields", "fsdp", "deepspeed"],
)
def test_the_importer_refuses_what_fast_ddp_would_drop(fields: dict[str, Any], message: str) -> None:
    from lightning_accel.habana.optimum import import_optimum_habana

    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"distribution_strategy": "fast_ddp", **fields})
    assert str(raised.value).startswith(message)
    with pytest.raises(ConfigurationError, match=r"distribution_strategy='fsdp' is not accepted. Accepted: 'ddp'"):
        import_optimum_habana(None, {"distribution_strategy": "fsdp"})


@pytest.mark.parametrize("accumulate", [1, 2], ids=["every-step", "accumulating"])
def test_training_hpu_graphs_with_fast_ddp_packing_as_operations_give_the_same_gradients(
    runs: TwoRankRuns, accumulate: int
) -> None:
    steps = ("--accumulate", str(accumulate))
    without, _ = runs("--strategy", "fast_ddp", "--no-graphs", *steps, lazy="1")
    graphed, _ = runs("--strategy", "fast_ddp", "--no-graphs", *steps, "--hpu-graphs-fit", lazy="1")
    for rank in range(2):
        run = graphed[rank]
        # HPUGraphs engaged: one training graph (one batch shape; two with accumulation, one per micro-step) served
        # all 6 training forwards; fast_ddp reduced once per update, without graphs of its own.
        assert (run["training_graphs"], run["training_graph_calls"]) == (accumulate, 6)
        assert (run["reductions"], run["hpu_graphs"], run["graph_captures"]) == (6 // accumulate, False, 0)
        assert without[rank]["training_graphs"] is None
        assert len(run["grads"]) == len(without[rank]["grads"]) == 6 // accumulate
        for with_graphs, plain in zip(run["grads"], without[rank]["grads"], strict=True):
            assert same_tensors(with_graphs, plain)
        assert same_tensors(run["state_dict"], without[rank]["state_dict"])


@pytest.mark.parametrize("use_hpu_graphs", [None, True], ids=["default", "true"])
def test_training_hpu_graphs_with_fast_ddps_packing_graphs_are_refused_before_the_run(
    lazy_mode: None, use_hpu_graphs: bool | None
) -> None:
    # Both would double every gradient after the first step (seen on the emulator: the packing graphs hand the
    # training graph's static gradient tensors back to the parameters, and its replay adds the new gradient to itself).
    from _habana_helpers import digits_classifier
    from lightning.pytorch import Trainer

    from lightning_accel.habana import HPUAccelerator, HPUFastDDPStrategy, HPUGraphs

    strategy = HPUFastDDPStrategy(parallel_devices=[torch.device("hpu")] * 2, use_hpu_graphs=use_hpu_graphs)
    graphs = HPUGraphs(stages=("fit",))
    trainer = Trainer(accelerator=HPUAccelerator(), strategy=strategy, devices=2, callbacks=[graphs], logger=False)
    with pytest.raises(ConfigurationError) as refused:
        graphs.setup(trainer, digits_classifier(), "fit")
    assert str(refused.value) == (
        f"HPUGraphs(stages=('fit',)) with HPUFastDDPStrategy(use_hpu_graphs={use_hpu_graphs!r}) is not accepted: in "
        "lazy mode fast_ddp packs the gradients with HPU graphs that keep the gradient tensors they captured, which "
        "are the training graph's own static gradient tensors (ModuleCacher hands those to the parameters' .grad); "
        "the next replay writes the new gradient into that memory and autograd adds it to itself, so every gradient "
        "after the first step is doubled. Accepted: HPUFastDDPStrategy(use_hpu_graphs=False) with "
        "HPUGraphs(stages=('fit', ...)) (gradients as DDP's), or HPUGraphs without 'fit' in stages."
    )
    HPUGraphs(stages=("validate",)).setup(trainer, digits_classifier(), "fit")  # no training graphs: nothing to refuse
    strategy.use_hpu_graphs = False
    graphs.setup(trainer, digits_classifier(), "fit")


def test_a_real_run_of_training_hpu_graphs_with_fast_ddps_packing_graphs_stops_before_its_first_step(
    tmp_path: Path,
) -> None:
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PT_HPU_LAZY_MODE="1")
    options = ("--strategy", "fast_ddp", "--hpu-graphs-fit")
    done = subprocess.run(
        [PYTHON, SCRIPT, "--out", str(tmp_path), *options], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "ConfigurationError: HPUGraphs(stages=('fit',)) with HPUFastDDPStrategy(use_hpu_graphs=None) is not" in (
        done.stderr
    )
    assert "fast_ddp: packing" not in done.stderr  # no gradient was reduced: no step ran
    assert not list(tmp_path.iterdir())
