"""The seeds' pattern (``import pytorch_lightning as pl`` plus instances of our classes) fits on the emulators, and
the same with ``lightning.pytorch`` and with Fabric (issue 12)."""

import json
from pathlib import Path

import pytest

SCRIPT = """
import json, sys
import torch
from lightning_accel.habana import HPUAccelerator, HPUCheckpointIO, HPUPrecisionPlugin
from lightning_accel.graphcore import IPUStrategy

if sys.argv[1] == "pytorch_lightning":
    import pytorch_lightning as pl
    from pytorch_lightning.demos.boring_classes import BoringModel
else:
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

quiet = dict(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
out = {}
trainer = pl.Trainer(
    accelerator="hpu",
    devices=1,
    plugins=[
        HPUPrecisionPlugin(
            precision="bf16-mixed", opt_level="O1", verbose=False, bf16_file_path="ops_bf16.txt",
            fp32_file_path="ops_fp32.txt",
        ),
        HPUCheckpointIO(),
    ],
    **quiet,
)
trainer.fit(BoringModel())
plugin = trainer.strategy.precision_plugin
out["precision"] = [type(plugin).__name__, sorted(plugin.lower_ops), sorted(plugin.fp32_ops), trainer.global_step]
out["checkpoint_io"] = type(trainer.strategy.checkpoint_io).__name__

trainer = pl.Trainer(accelerator=HPUAccelerator(), devices=1, **quiet)
trainer.fit(BoringModel())
out["accelerator"] = [type(trainer.accelerator).__name__, type(trainer.strategy).__name__, trainer.global_step]

trainer = pl.Trainer(accelerator="ipu", devices=1, strategy=IPUStrategy(device_iterations=2), **quiet)
trainer.fit(BoringModel())
out["ipu"] = [type(trainer.strategy).__name__, trainer.global_step]
out["tree"] = {type(trainer.strategy).__module__.startswith("lightning_accel.core.twins.pytorch_lightning")}.pop()
print("RESULT" + json.dumps(out))
"""

FABRIC = """
import json, sys
import torch
from lightning_accel.habana.fabric import HPUAccelerator, HPUPrecision, SingleHPUStrategy

if sys.argv[1] == "pytorch_lightning":
    from lightning_fabric import Fabric
else:
    from lightning.fabric import Fabric

fabric = Fabric(strategy=SingleHPUStrategy(accelerator=HPUAccelerator()), plugins=[HPUPrecision("bf16-mixed")])
model = torch.nn.Linear(4, 2)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
fabric.backward(model(torch.randn(3, 4, device=fabric.device)).sum())
optimizer.step()
print("RESULT" + json.dumps([type(fabric.strategy).__name__, type(fabric.strategy.precision).__name__,
    type(fabric.accelerator).__name__]))
"""


def _result(process) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])  # type: ignore[no-any-return]


@pytest.mark.parametrize("tree", ["pytorch_lightning", "lightning"])
def test_seed_pattern_with_instances_fits(run, tmp_path: Path, tree: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "ops_bf16.txt").write_text("linear\naddmm\n")
    (tmp_path / "ops_fp32.txt").write_text("softmax\n")
    (tmp_path / "script.py").write_text(SCRIPT)
    # The SDK reads its autocast lists when it loads (at `import torch`): they are set before the start, as on Gaudi.
    lists = {
        "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": str(tmp_path / "ops_bf16.txt"),
        "PT_HPU_AUTOCAST_FP32_OPS_LIST": str(tmp_path / "ops_fp32.txt"),
    }
    out = _result(run(["script.py", tree], env={"LIGHTNING_ACCEL_EMULATE": "hpu,ipu", **lists}, cwd=tmp_path))
    assert out["precision"] == ["HPUPrecisionPlugin", ["addmm", "linear"], ["softmax"], 2]
    assert out["checkpoint_io"] == "HPUCheckpointIO"
    assert out["accelerator"] == ["HPUAccelerator", "SingleHPUStrategy", 2]
    assert out["ipu"] == ["IPUStrategy", 2]
    assert out["tree"] is (tree == "pytorch_lightning")


@pytest.mark.parametrize("tree", ["pytorch_lightning", "lightning"])
def test_fabric_with_instances(run, tmp_path: Path, tree: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "script.py").write_text(FABRIC)
    out = _result(run(["script.py", tree], env={"LIGHTNING_ACCEL_EMULATE": "hpu"}, cwd=tmp_path))
    assert out == ["SingleHPUStrategy", "HPUPrecision", "HPUAccelerator"]
