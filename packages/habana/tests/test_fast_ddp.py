"""fast_ddp (optimum-habana's gradient all-reduce without DDP's reducer) on two real processes over emulated HCCL."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env

from lightning_accel.core.errors import ConfigurationError

SCRIPT = str(SCRIPTS / "fast_ddp_fit.py")


def _run(out: Path, *options: str, lazy: str = "0") -> list[dict[str, Any]]:
    out.mkdir()
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PT_HPU_LAZY_MODE=lazy)
    done = subprocess.run(
        [PYTHON, SCRIPT, "--out", str(out), *options], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("accumulate", "lazy"), [(1, "0"), (2, "0"), (1, "1")], ids=["every-step", "accumulating", "lazy-mode"]
)
def test_fast_ddp_trains_in_lockstep_to_ddps_weights_without_a_reducer(
    tmp_path: Path, accumulate: int, lazy: str
) -> None:
    # Eager mode (the SDK's default) and lazy mode (optimum-habana's default, where the all-reduce joins the graph).
    ddp = _run(tmp_path / "ddp", "--strategy", "ddp", "--accumulate", str(accumulate), lazy=lazy)
    fast = _run(tmp_path / "fast", "--strategy", "fast_ddp", "--accumulate", str(accumulate), lazy=lazy)
    assert [r["wrapped_in_ddp"] for r in ddp] == [True, True]
    assert [(r["wrapped_in_ddp"], r["reducer"]) for r in fast] == [(False, False)] * 2  # no DDP, no reducer
    # One all-reduce per weight update (6 batches), none inside gradient accumulation.
    assert [r["reductions"] for r in fast] == [6 // accumulate] * 2
    assert [r["global_step"] for r in fast] == [r["global_step"] for r in ddp] == [6 // accumulate] * 2
    # Each rank built other weights; rank 0's reached both before training, as DDP broadcasts them.
    assert _same(fast[0]["start"], fast[1]["start"])
    assert _same(fast[0]["start"], ddp[0]["start"])
    for rank in range(2):
        # Averaged in float32 as DDP's reducer averages: the same gradients and the same trained weights.
        for fast_grads, ddp_grads in zip(fast[rank]["grads"], ddp[rank]["grads"], strict=True):
            for name, grad in ddp_grads.items():
                torch.testing.assert_close(fast_grads[name], grad, rtol=1e-6, atol=1e-7)
        for name, weight in ddp[rank]["state_dict"].items():
            torch.testing.assert_close(fast[rank]["state_dict"][name], weight, rtol=1e-5, atol=1e-6)
    assert _same(fast[0]["state_dict"], fast[1]["state_dict"])  # the ranks never drift apart
    assert not _same(fast[0]["state_dict"], fast[0]["start"])  # and they trained


def test_a_bfloat16_buffer_rounds_the_averaged_gradients_as_optimum_habana_does(tmp_path: Path) -> None:
    ddp = _run(tmp_path / "ddp", "--strategy", "ddp")
    fast = _run(tmp_path / "fast", "--strategy", "fast_ddp", "--buffer-dtype", "bfloat16")
    assert _same(fast[0]["state_dict"], fast[1]["state_dict"])
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


def test_a_parameter_whose_gradient_comes_and_goes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_accel.habana.strategies.fast_ddp import GradientFusion

    # One process, no group: the collectives answer as a world of one (the check runs before any collective).
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, group=None: None)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    fusion = GradientFusion(model)
    model[1](torch.ones(1, 3)).sum().backward()  # only the second layer has gradients
    fusion.all_reduce()
    model(torch.ones(1, 3)).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameter '0.weight' has a gradient now but had none at the first step"):
        fusion.all_reduce()


def test_the_importer_maps_optimum_habanas_fast_ddp_to_the_strategy(eager_mode: None, tmp_path: Path) -> None:
    from lightning.pytorch import Trainer

    from lightning_accel.habana import HPUFastDDPStrategy
    from lightning_accel.habana.optimum import import_optimum_habana

    arguments = {"distribution_strategy": "fast_ddp", "ddp_timeout": 60, "use_lazy_mode": False, "report_to": "none"}
    run = import_optimum_habana(None, {**arguments, "output_dir": str(tmp_path)})
    strategy = Trainer(**run.trainer_kwargs(devices=2)).strategy
    assert isinstance(strategy, HPUFastDDPStrategy)
    assert strategy.buffer_dtype == torch.bfloat16  # optimum-habana's buffer
    assert strategy._timeout.total_seconds() == 60


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
