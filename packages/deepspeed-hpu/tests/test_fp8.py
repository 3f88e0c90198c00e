"""fp8 training under DeepSpeed on HPUs: ``HPUDeepSpeedPrecisionPlugin("fp8")`` with the SDK's Transformer Engine.

DeepSpeed runs in float32 (its config gets no bf16/fp16 section); the model's ``torch.nn.Linear`` layers become the
SDK's ``transformer_engine.Linear`` (``convert_modules(replace_layers=True)``) and the steps run inside its
``fp8_autocast``, as with :class:`~lightning_accel.habana.HPUPrecisionPlugin`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _ds_hpu_helpers import read_json, run_script

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin

HABANA_TESTS = Path(__file__).resolve().parents[2] / "habana" / "tests"

FIT_IN_FP8 = """
import json, sys
import torch
from lightning.pytorch import Trainer
sys.path.insert(0, sys.argv[2])
from _habana_helpers import digits_classifier, digits_loaders
from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin
from lightning_accel.habana import sdk

torch.manual_seed(0)
te = sdk.transformer_engine_module()
model = digits_classifier()
plugin = HPUDeepSpeedPrecisionPlugin("fp8")
plugin.convert_modules(model, replace_layers=True, recipe={"fp8_format": te.recipe.Format.HYBRID})
train, val = digits_loaders()
trainer = Trainer(accelerator="hpu", devices=1, strategy="hpu_deepspeed_stage_2", plugins=[plugin], max_epochs=4,
                  logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, train, val)
layers = [m for m in model.modules() if isinstance(m, te.Linear)]
with open(sys.argv[1], "w") as out:
    json.dump({"val_acc": float(trainer.callback_metrics["val_acc"]), "layers": len(layers),
               "scaled": all(bool((m.fp8_meta["scaling_fwd"].scale != 1).all()) for m in layers),
               "recipe": layers[0].fp8_meta["recipe"].fp8_format.name,
               "bf16": trainer.strategy.config.get("bf16"), "fp16": trainer.strategy.config.get("fp16")}, out)
"""


@pytest.mark.slow
def test_deepspeed_trains_in_fp8_with_transformer_engine_layers(tmp_path: Path) -> None:
    script = tmp_path / "fit_fp8.py"
    script.write_text(FIT_IN_FP8)
    report = tmp_path / "report.json"
    run_script(str(script), str(report), str(HABANA_TESTS))
    result = read_json(report)
    assert result["val_acc"] > 0.9
    assert result["layers"] == 2
    assert result["scaled"] is True
    assert result["recipe"] == "HYBRID"
    assert result["bf16"] is None and result["fp16"] is None  # DeepSpeed itself runs in float32


def test_fp8_arguments_are_checked_as_the_hpu_plugin_checks_them() -> None:
    import torch

    plugin = HPUDeepSpeedPrecisionPlugin("fp8")
    assert plugin.precision == "fp8" and plugin.fp8_train_available
    with pytest.raises(ConfigurationError, match=r"precision is 'bf16-mixed'.*precision='fp8'"):
        HPUDeepSpeedPrecisionPlugin("bf16-mixed").convert_modules(torch.nn.Linear(2, 2), replace_layers=True)
    with pytest.raises(ConfigurationError, match=r"inference=True.*Intel Neural Compressor swaps the layers inside"):
        plugin.convert_modules(torch.nn.Linear(2, 2), inference=True)  # a layer alone, no model holding it
    with pytest.raises(ConfigurationError, match=r"inference=True, replace_layers=True.*for fp8 training"):
        plugin.convert_modules(torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, replace_layers=True)
    with pytest.raises(ConfigurationError, match=r"precision='fp9' is not supported by DeepSpeed on HPU.*'fp8'"):
        HPUDeepSpeedPrecisionPlugin("fp9")
