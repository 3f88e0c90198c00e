"""The transformers recipes (examples/habana/transformers) run with their configs, at tiny sizes, on HPUs.

Each variant is one process (``run_clm.py fit --config configs/clm_tiny.yaml --config configs/<variant>.yaml``), as a
user starts it: the SDK's mode is chosen when the process starts, and the 2-device variants start their ranks. The
models are built from configs in code with a character-level tokenizer: nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RECIPES = Path(__file__).resolve().parents[3] / "examples" / "habana" / "transformers"
# Steps of 8 x 32 characters of data/corpus.txt; a tiny GPT-2's loss drops from about 4.6 to about 2.9 in 12 steps.
SHORT = ["--training.max_steps", "8"]
# Regional compilation against eager, 8 steps: a few 1e-3 apart at most on the emulator (Inductor reorders float
# sums); a compiled graph that computed something else differs by far more from the second step on.
COMPILE_TOLERANCE = 2e-2


def _recipe(
    script: str, variant: str, tmp_path: Path, *extra: str, lazy: bool = False, base: str = "clm_tiny"
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PT_HPU_", "HABANA_"))}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PT_HPU_LAZY_MODE="1" if lazy else "0")
    args = [
        str(RECIPES / script),
        "fit",
        "--config",
        str(RECIPES / "configs" / f"{base}.yaml"),
        "--config",
        str(RECIPES / "configs" / f"{variant}.yaml"),
        *(SHORT if base == "clm_tiny" else []),
        "--training.output_dir",
        str(tmp_path),
        *extra,
    ]
    # Run from the recipes' folder, as a user there would: the configs name data and JSON files relative to it.
    # Whatever a run writes goes to output_dir (the Trainer's default_root_dir).
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=RECIPES, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _falls(losses: list[float]) -> None:
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    assert last < first - 0.3, losses


@pytest.fixture(scope="module")
def eager_clm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _recipe("run_clm.py", "eager", tmp_path_factory.mktemp("eager"))


def test_causal_lm_eager_learns(eager_clm: dict[str, Any]) -> None:
    assert eager_clm["accelerator"] == "HPUAccelerator"
    assert eager_clm["lazy"] is False
    assert eager_clm["steps"] == 8
    _falls(eager_clm["losses"])


def test_causal_lm_regional_compile_matches_eager(eager_clm: dict[str, Any], tmp_path: Path) -> None:
    compiled = _recipe("run_clm.py", "compile", tmp_path)
    assert "HPUCompile" in compiled["callbacks"]
    # HPUCompileMetrics' count: Dynamo really compiled (a compile that engaged nothing would give 0).
    assert compiled["metrics"]["compile/graph_compilations_total"] >= 1, compiled["metrics"]
    assert len(compiled["losses"]) == len(eager_clm["losses"])
    for step, (c, e) in enumerate(zip(compiled["losses"], eager_clm["losses"], strict=True)):
        assert abs(c - e) <= COMPILE_TOLERANCE, (step, compiled["losses"], eager_clm["losses"])


def test_causal_lm_lazy_mode_learns(tmp_path: Path) -> None:
    result = _recipe("run_clm.py", "lazy", tmp_path, lazy=True)
    assert result["lazy"] is True
    _falls(result["losses"])


def test_causal_lm_hpu_graphs_for_training_learns(tmp_path: Path) -> None:
    result = _recipe("run_clm.py", "hpu_graphs", tmp_path, lazy=True)
    assert "HPUGraphs" in result["callbacks"]
    _falls(result["losses"])


def test_causal_lm_fsdp_with_an_optimum_habana_fsdp_config_learns(tmp_path: Path) -> None:
    # optimum-habana's FSDP recipe: --fsdp "full_shard auto_wrap" and an fsdp_config naming its Gaudi block class.
    arguments = tmp_path / "training_args.json"
    config = {"fsdp_transformer_layer_cls_to_wrap": "GaudiGPT2Block", "fsdp_activation_checkpointing": True}
    arguments.write_text(json.dumps({"fsdp_config": config}))
    result = _recipe(
        "run_clm.py",
        "eager",
        tmp_path,
        "--trainer.devices",
        "2",
        "--training.fsdp",
        "full_shard auto_wrap",
        "--optimum.training_args",
        str(arguments),
    )
    assert result["strategy"] == "HPUFSDPStrategy"
    assert result["fsdp_units"] == 3  # the 2 GPT-2 blocks and the root
    _falls(result["losses"])


def test_causal_lm_fp8_trains_its_attention_in_fp8(tmp_path: Path) -> None:
    result = _recipe("run_clm.py", "fp8", tmp_path)
    assert result["precision"] == "fp8"
    # Every attention layer goes through its own FusedAttention (the model was built before the import gave it).
    assert result["attention"] == "lightning_accel_fp8_fused_sdpa"
    _falls(result["losses"])


@pytest.mark.slow
def test_causal_lm_fsdp2_on_two_hpus_learns(tmp_path: Path) -> None:
    result = _recipe("run_clm.py", "fsdp2", tmp_path)
    assert result["strategy"] == "HPUModelParallelStrategy"
    _falls(result["losses"])


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is not installed here: the ZeRO-3 variant runs where lightning-accel-deepspeed-hpu is",
)
@pytest.mark.slow
def test_causal_lm_deepspeed_zero3_on_two_hpus_learns(tmp_path: Path) -> None:
    result = _recipe("run_clm.py", "deepspeed_zero3", tmp_path)
    assert result["strategy"] == "HPUDeepSpeedStrategy"
    _falls(result["losses"])


def test_sequence_classification_with_a_gaudi_config_learns(tmp_path: Path) -> None:
    # gaudi_config.json (Habana/gpt2's settings) through the importer: bf16 autocast and the SDK's fused AdamW.
    result = _recipe("run_glue.py", "eager", tmp_path, "--optimum.gaudi_config", "gaudi_config.json", base="glue_tiny")
    assert result["precision"] == "bf16-mixed", result
    assert result["optimizer"] == "FusedAdamW", result
    _falls(result["losses"])
    assert "eval_accuracy" in result["metrics"], result["metrics"]
