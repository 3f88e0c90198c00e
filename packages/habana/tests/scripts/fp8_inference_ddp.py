"""Child script of the fp8 inference tests: measure and quantize with INC on two emulated HPUs under DDP predict.

The LightningModule converts itself in ``on_predict_start``, once the two processes exist, so that INC names each
rank's measurement files for that rank. A first ``trainer.predict`` over the calibration data measures (each rank its
half), a second quantizes from those files and predicts the validation data. Each rank writes its predictions and
the indices of its samples to ``rank<N>.pt``; rank 0 lists the measurement folder.

Usage: ``python fp8_inference_ddp.py WEIGHTS DATA_DIR OUT``; Lightning's launcher re-runs it for the second rank.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _habana_helpers import digits_classifier
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import HPUPrecisionPlugin


def main() -> None:
    weights, data_dir, out = (Path(a) for a in sys.argv[1:4])
    calibration, validation = torch.load(data_dir / "data.pt")
    plugin = HPUPrecisionPlugin("fp8")
    model: Any = digits_classifier()
    model.load_state_dict(torch.load(weights))
    model.quant = False

    def on_predict_start() -> None:
        plugin.convert_modules(model, inference=True, quant=model.quant, fp8_data_path=data_dir)

    model.on_predict_start = on_predict_start
    model.predict_step = lambda batch, *args: model(batch[0]).float()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy="hpu_parallel",
        plugins=[plugin],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.predict(model, DataLoader(TensorDataset(calibration), batch_size=64))
    model.quant = True
    logits = trainer.predict(model, DataLoader(TensorDataset(validation), batch_size=64))
    rank, world = trainer.global_rank, trainer.world_size
    torch.save(
        {
            "logits": torch.cat(logits).cpu(),  # type: ignore[arg-type]
            "indices": list(range(rank, len(validation), world)),  # DistributedSampler without shuffling
            "layers": [type(m).__name__ for m in model.net],
        },
        out / f"rank{rank}.pt",
    )
    if rank == 0:
        (out / "files.txt").write_text("\n".join(sorted(p.name for p in (data_dir / "inc_output").iterdir())))


if __name__ == "__main__":
    main()
