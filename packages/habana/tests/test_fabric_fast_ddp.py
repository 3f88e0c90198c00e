"""Fabric's fast_ddp (optimum-habana's gradient all-reduce without DDP's reducer) against Fabric's DDP, on two real
processes over emulated HCCL; and its rules in one process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _habana_helpers import SCRIPTS, TwoRankRuns, same_tensors

from lightning_accel.core.errors import ConfigurationError

SCRIPT = SCRIPTS / "fabric_fast_ddp_fit.py"
_CAPTURED = "fast_ddp: packing and unpacking 4 gradients (4810 elements, torch.float32) captured as 2 HPU graphs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRankRuns:
    return TwoRankRuns(SCRIPT, tmp_path_factory.mktemp("fabric_fast_ddp"))


@pytest.mark.parametrize("lazy", ["0", "1"], ids=["eager", "lazy-hpu-graphs"])
def test_fabric_fast_ddp_gives_fabric_ddps_gradients_without_a_wrapper_or_reducer(runs: TwoRankRuns, lazy: str) -> None:
    # Two batches per optimizer step: each step has a backward pass inside no_backward_sync and one outside it.
    # Fabric's DDP reference runs in eager mode: on the emulator its gradients are the same in both modes.
    accumulate = 2
    ddp, _ = runs("--strategy", "hpu_ddp", "--accumulate", str(accumulate))
    fast, stderr = runs("--strategy", "hpu_fast_ddp", "--accumulate", str(accumulate), lazy=lazy)
    described = [(r["strategy"], r["wrapped_in_ddp"], r["reducer"]) for r in [*ddp, *fast]]
    assert described == [("HPUParallelStrategy", True, True)] * 2 + [("HPUFastDDPStrategy", False, False)] * 2
    # One all-reduce per optimizer step (6 batches); none for the backward passes inside no_backward_sync.
    updates = 6 // accumulate
    assert [r["reductions"] for r in fast] == [updates] * 2
    # By default HPU graphs in lazy mode: captured at the first reduction, replayed at each later one.
    graphs = lazy == "1"
    for run in fast:
        assert run["hpu_graphs"] is graphs
        assert (run["graph_captures"], run["graph_replays"]) == ((2, 2 * (updates - 1)) if graphs else (0, 0))
        assert run["sdk_graph_calls"] == {"capture_begin": run["graph_captures"], "replay": run["graph_replays"]}
        assert run["gradient_copies"] == 0  # zero_grad's None gradients were given their captured tensors back
    assert (_CAPTURED in stderr) is graphs
    # Each rank built other weights; rank 0's reached both at set-up, as DDP broadcasts them.
    assert same_tensors(fast[0]["start"], fast[1]["start"])
    assert same_tensors(fast[0]["start"], ddp[0]["start"])
    for rank in range(2):
        assert len(fast[rank]["grads"]) == len(ddp[rank]["grads"]) == updates
        for fast_grads, ddp_grads in zip(fast[rank]["grads"], ddp[rank]["grads"], strict=True):
            for name, grad in ddp_grads.items():
                torch.testing.assert_close(fast_grads[name], grad, rtol=1e-6, atol=1e-7)
        for name, weight in ddp[rank]["state_dict"].items():
            torch.testing.assert_close(fast[rank]["state_dict"][name], weight, rtol=1e-5, atol=1e-6)
    assert same_tensors(fast[0]["state_dict"], fast[1]["state_dict"])  # the ranks never drift apart
    assert not same_tensors(fast[0]["state_dict"], fast[0]["start"])  # and they trained


def test_the_name_gives_the_fabric_strategy_with_the_trainers_options() -> None:
    from lightning.fabric import Fabric

    from lightning_accel.habana import fabric as habana_fabric
    from lightning_accel.habana.fabric import HPUFastDDPStrategy
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion  # still there, for the Trainer's users

    assert "HPUFastDDPStrategy" in habana_fabric.__all__
    assert GradientFusion.__module__ == "lightning_accel.habana._gradient_fusion"
    strategy = Fabric(accelerator="hpu", strategy="hpu_fast_ddp", devices=2).strategy
    assert type(strategy) is HPUFastDDPStrategy
    assert (strategy.buffer_dtype, strategy.use_hpu_graphs, strategy.num_processes) == (torch.float32, None, 2)
    chosen = HPUFastDDPStrategy(buffer_dtype=torch.bfloat16, use_hpu_graphs=False)
    assert Fabric(accelerator="hpu", strategy=chosen, devices=2).strategy is chosen


def test_bad_arguments_are_refused_naming_the_argument_and_what_is_accepted() -> None:
    from lightning_accel.habana.fabric import HPUFastDDPStrategy

    with pytest.raises(ConfigurationError) as refused:
        HPUFastDDPStrategy(find_unused_parameters=True)
    assert str(refused.value).startswith(
        "HPUFastDDPStrategy: find_unused_parameters not accepted: these are arguments of DistributedDataParallel, "
        "which fast_ddp does not build. Accepted: accelerator, parallel_devices, cluster_environment, checkpoint_io, "
        "precision, process_group_backend,"
    )
    with pytest.raises(ConfigurationError, match=r"buffer_dtype=torch.float16\) is not accepted. Accepted: torch.fl"):
        HPUFastDDPStrategy(buffer_dtype=torch.float16)
    with pytest.raises(ConfigurationError, match=r"Strategy\(use_hpu_graphs='yes'\) is not accepted. Accepted: True"):
        HPUFastDDPStrategy(use_hpu_graphs="yes")  # type: ignore[arg-type]


def _strategy_without_peers(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Any:
    # No process group: the collectives answer as a world of two whose other rank adds 1 to every element of the
    # buffer, and the broadcast keeps this rank's weights. Reductions are counted.
    from lightning_accel.habana.fabric import HPUFastDDPStrategy

    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, group=None: tensor.add_(1.0))
    monkeypatch.setattr(torch.distributed, "broadcast", lambda tensor, src=0: tensor)
    return HPUFastDDPStrategy(**options)


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to("hpu")


def test_use_hpu_graphs_true_is_refused_at_setup_in_eager_mode(
    eager_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = _strategy_without_peers(monkeypatch, use_hpu_graphs=True)
    with pytest.raises(ConfigurationError) as refused:
        strategy.setup_module(_net())
    assert str(refused.value).startswith(
        "HPUFastDDPStrategy(use_hpu_graphs=True): the SDK runs in eager mode (PT_HPU_LAZY_MODE=0 or unset, the default "
        "since SDK 1.21), and HPU graphs are created in lazy mode only. Set PT_HPU_LAZY_MODE=1"
    )
    assert strategy.fusions == []
    default = _strategy_without_peers(monkeypatch)
    net = default.setup_module(_net())  # use_hpu_graphs=None: no graphs in eager mode
    assert default.fusions[0].use_hpu_graphs is False
    with pytest.raises(ConfigurationError, match=r"setup_module: this Sequential was set up before, and a second"):
        default.setup_module(net)


def test_a_backward_pass_reduces_only_the_modules_it_reached_and_leaves_the_others_gradients_none(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = _strategy_without_peers(monkeypatch)
    first, second = strategy.setup_module(_net()), strategy.setup_module(_net())
    x = torch.ones(5, 3, device="hpu")
    for step in range(3):
        strategy.backward(first(x).pow(2).sum(), None)
        assert [f.reductions for f in strategy.fusions] == [step + 1, 0]
        # With graphs, prepare_backward gave none to the second module: it had no reduction yet.
        assert all(p.grad is None for p in second.parameters())
        first.zero_grad(set_to_none=True)
    assert strategy.fusions[0].graph_captures == 2
    strategy.backward(second(x).pow(2).sum(), None)
    assert [f.reductions for f in strategy.fusions] == [3, 1]
    second.zero_grad(set_to_none=True)
    strategy.backward(first(x).pow(2).sum(), None)
    # The second module's captured gradients, given back before the backward pass, are None again: it was not reached.
    assert all(p.grad is None for p in second.parameters())
    assert [f.reductions for f in strategy.fusions] == [4, 1]


def test_no_backward_sync_skips_the_reduction_of_that_module_only_and_refuses_modules_not_set_up(
    lazy_mode: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = _strategy_without_peers(monkeypatch, use_hpu_graphs=False)
    model = strategy.setup_module(_net())
    control = strategy._backward_sync_control
    x = torch.ones(5, 3, device="hpu")
    with control.no_backward_sync(model, enabled=True):
        strategy.backward(model(x).sum(), None)
        with control.no_backward_sync(model, enabled=True):  # nested, as a user's helper may do
            strategy.backward(model(x).sum(), None)
        strategy.backward(model(x).sum(), None)
    assert strategy.gradient_reductions == 0
    with control.no_backward_sync(model, enabled=False):
        strategy.backward(model(x).sum(), None)
    assert strategy.gradient_reductions == 1
    with pytest.raises(TypeError, match=r"no_backward_sync: Linear was not set up by this strategy. Pass a module"):
        control.no_backward_sync(torch.nn.Linear(1, 1), enabled=True)
