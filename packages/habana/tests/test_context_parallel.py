"""Context parallelism (optimum-habana's context_parallel_size) on real processes over emulated HCCL."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, free_port, script_env

from lightning_accel.core.errors import ConfigurationError

SCRIPT = str(SCRIPTS / "context_parallel_fit.py")


def _launch(out: Path, cp: int, devices: int, *options: str, lazy: str = "0") -> subprocess.CompletedProcess[str]:
    out.mkdir()
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PT_HPU_LAZY_MODE=lazy, HF_HUB_OFFLINE="1")
    command = [PYTHON, SCRIPT, "--out", str(out), "--cp", str(cp), "--devices", str(devices), *options]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _run(out: Path, cp: int, devices: int, *options: str, lazy: str = "0") -> list[dict[str, Any]]:
    done = _launch(out, cp, devices, *options, lazy=lazy)
    assert done.returncode == 0, done.stderr[-4000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(devices)]


@pytest.fixture(scope="module")
def unsplit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # One process, context_parallel_size=1: the child checks its loss against transformers' own causal-LM loss.
    (run,) = _run(tmp_path_factory.mktemp("cp1") / "out", cp=1, devices=1)
    return run


@pytest.mark.parametrize("lazy", ["0", "1"], ids=["eager", "lazy"])
def test_losses_at_cp2_equal_the_unsplit_run(unsplit: dict[str, Any], tmp_path: Path, lazy: str) -> None:
    split = _run(tmp_path / "cp2", cp=2, devices=2, lazy=lazy)
    for rank in split:
        # Each rank holds half of every sequence, and reports the loss of the whole batch.
        torch.testing.assert_close(rank["losses"], unsplit["losses"], rtol=1e-5, atol=0)
        # Every attention call of the 2 layers in the 3 steps went through the group.
        assert rank["routed_calls"] == 2 * 3
        for name, weight in unsplit["state_dict"].items():
            torch.testing.assert_close(rank["state_dict"][name], weight, rtol=1e-5, atol=1e-6)
    assert unsplit["losses"][0] != unsplit["losses"][2]  # it trained
    for name, weight in split[0]["state_dict"].items():
        assert torch.equal(weight, split[1]["state_dict"][name]), name  # the ranks never drift apart


def test_fused_sdpa_attends_over_the_group_on_the_sdks_kernel(unsplit: dict[str, Any], tmp_path: Path) -> None:
    # optimum-habana's gaudi_fused_sdpa with context_parallel_size=2: each rank's slice attends over the gathered keys
    # and values on FusedSDPA, with the causal mask moved to the slice's start.
    split = _run(tmp_path / "cp2", 2, 2, "--fused-sdpa")
    for rank in split:
        torch.testing.assert_close(rank["losses"], unsplit["losses"], rtol=1e-5, atol=0)
        # Every attention call (2 layers, 3 steps) went through the group, and on the SDK's kernel.
        assert rank["routed_calls"] == rank["fused_calls"] == 2 * 3


@pytest.mark.parametrize(
    ("cp", "devices", "options", "message"),
    [
        (
            2,
            1,
            [],
            "context_parallel_size=2 does not divide the world size 1 (devices x num_nodes). Accepted: a divisor of 1.",
        ),
        (
            2,
            2,
            ["--attention", "eager"],
            "LlamaForCausalLM has attn_implementation='eager': its attention does not go through "
            "scaled_dot_product_attention, so context_parallel_size=2 could not split it. Load a transformers model "
            "with attn_implementation='sdpa'",
        ),
        (
            2,
            2,
            ["--attention", "none"],
            "context_parallel_size=2: the first training step of CausalLM made no scaled_dot_product_attention call, "
            "so its attention was not split over the group",
        ),
        (
            2,
            2,
            ["--model-loss"],
            "context_parallel_size=2: the training step of CausalLM did not compute its loss with "
            "trainer.strategy.context_parallel.loss(logits, labels).",
        ),
        (
            2,
            2,
            ["--no-split"],
            "Attention over 16 positions under context_parallel_size=2, but the step did not split its batch",
        ),
        (
            2,
            2,
            ["--compile"],
            "context_parallel_size=2: model is compiled (torch.compile / Module.compile / HPUCompile). Context "
            "parallelism runs in eager and lazy mode only",
        ),
    ],
    ids=["size-not-dividing-world", "eager-attention", "no-attention-call", "model-loss", "no-split", "compiled"],
)
def test_runs_that_would_not_split_are_refused(
    tmp_path: Path, cp: int, devices: int, options: list[str], message: str
) -> None:
    done = _launch(tmp_path / "out", cp, devices, *options)
    assert done.returncode != 0
    assert message in " ".join(done.stderr.split()), done.stderr[-4000:]


def test_bad_arguments_and_inputs_are_refused() -> None:
    from lightning_accel.habana import ContextParallel, HPUContextParallelStrategy

    with pytest.raises(ConfigurationError, match=r"context_parallel_size=0 is not accepted. Accepted: an int >= 1"):
        HPUContextParallelStrategy(context_parallel_size=0)
    with pytest.raises(ConfigurationError, match=r"context_parallel_size='2' is not accepted"):
        ContextParallel("2", 0)  # type: ignore[arg-type]
    cp = ContextParallel(2, 1)
    with pytest.raises(ConfigurationError) as raised:
        cp.split(torch.zeros(2, 15, dtype=torch.long))
    assert str(raised.value).startswith(
        "The sequence length 15 (input_ids.shape[1]) is not divisible by context_parallel_size=2. Accepted: a "
        "multiple of 2. Pad or truncate"
    )
    ids = torch.arange(8).reshape(1, 8)
    with pytest.raises(ConfigurationError, match=r"attention_mask with padding \(zeros\) is not accepted"):
        cp.split(ids, attention_mask=torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]]))
    inputs, labels = cp.split(ids, attention_mask=torch.ones(1, 8))
    # Rank 1 of 2: the second half, with its positions, and the labels shifted before slicing.
    assert inputs["input_ids"].tolist() == [[4, 5, 6, 7]]
    assert inputs["position_ids"].tolist() == [[4, 5, 6, 7]]
    assert labels.tolist() == [[5, 6, 7, -100]]
    q = torch.zeros(1, 2, 4, 8)
    # Refused before anything is exchanged.
    with cp.attention():
        cp.split(ids)
        with pytest.raises(ConfigurationError, match=r"is_causal=False\) is not accepted under context parallelism"):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
        with pytest.raises(ConfigurationError, match=r"attn_mask=a tensor, is_causal=False\) is not accepted"):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))
        with pytest.raises(ConfigurationError, match=r"Keys of length 6 for queries of length 4: a key/value cache"):
            kv = torch.zeros(1, 2, 6, 8)
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True)
    # Outside the strategy's steps the process's attention is left alone.
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
