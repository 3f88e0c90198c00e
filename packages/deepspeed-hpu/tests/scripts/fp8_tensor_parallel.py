"""fp8 inference through INC under DeepSpeed tensor-parallel inference on two emulated HPUs, or on one for reference.

usage: fp8_tensor_parallel.py OUT (measure|quantize) (tp|single)

``tp``: ``trainer.predict`` with ``HPUDeepSpeedStrategy(tensor_parallel={"tp_size": 2})`` and
``HPUDeepSpeedPrecisionPlugin("fp8")``; the model converts itself in ``on_predict_start``, after DeepSpeed has split
its layers. ``measure`` predicts the calibration data (INC writes each rank's maxima into OUT/inc_output), ``quantize``
is a later run (a new process, as a user runs it) that quantizes from them and predicts the test data. ``single``:
the same two runs on one HPU with ``HPUPrecisionPlugin("fp8")``. Each rank writes OUT/<layout>-<mode>-rank<N>.pt:
the predictions, the float32 predictions of the unconverted model, the model's layer types, and (rank 0) the files
of OUT/inc_output.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin, HPUDeepSpeedStrategy
from lightning_accel.habana import HPUPrecisionPlugin


class TwoLayers(LightningModule):
    def __init__(self, mode: str, out: Path) -> None:
        super().__init__()
        self.l0 = torch.nn.Linear(32, 256)
        self.l1 = torch.nn.Linear(256, 16)
        self.mode, self.out = mode, out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l1(torch.relu(self.l0(x)))

    def on_predict_start(self) -> None:
        plugin: Any = self.trainer.precision_plugin
        plugin.convert_modules(self, inference=True, quant=self.mode == "quantize", fp8_data_path=self.out)

    def predict_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0]).float()


def main() -> None:
    out, mode, layout = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    model = TwoLayers(mode, out)  # the same weights in every run and rank
    data = torch.randn(64, 32, generator=torch.Generator().manual_seed(1 if mode == "measure" else 2))
    with torch.no_grad():
        expected = model(data)  # float32, on the host, before anything is split or quantized
    if layout == "tp":
        strategy: Any = HPUDeepSpeedStrategy(
            tensor_parallel={"tp_size": 2}, replace_with_kernel_inject=False, injection_policy={TwoLayers: ("l1",)}
        )
        plugin: Any = HPUDeepSpeedPrecisionPlugin("fp8")
    else:
        strategy, plugin = "auto", HPUPrecisionPlugin("fp8")
    trainer = Trainer(
        accelerator="hpu",
        devices=2 if layout == "tp" else 1,
        strategy=strategy,
        plugins=[plugin],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    batches = trainer.predict(model, DataLoader(TensorDataset(data), batch_size=16))
    assert batches is not None
    result = {
        "predictions": torch.cat(batches).cpu(),  # type: ignore[arg-type]
        "expected": expected,
        "layers": {name: type(module).__name__ for name, module in model.named_children()},
    }
    if trainer.is_global_zero:
        result["files"] = sorted(path.name for path in (out / "inc_output").iterdir())
    torch.save(result, out / f"{layout}-{mode}-rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
