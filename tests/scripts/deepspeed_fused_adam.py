"""Child of test_deepspeed_fused_adam.py: DeepSpeed's FusedAdam (config "AdamW") against DeepSpeed's torch AdamW.

Two fits from the same weights on the same batches, one HPU, ZeRO stage 0: once with the config's optimizer as
DeepSpeed builds it on HPUs (its FusedAdam, which calls torch.ops.hpu.optimizer_adamw), once with "torch_adam": true.
Prints one REPORT line.
"""

from __future__ import annotations

import json
from typing import Any

import lightning as L
import torch

from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy

LR, WD, STEPS = 0.05, 0.1, 4
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
init = {k: v.clone() for k, v in torch.nn.Linear(4, 2).state_dict().items()}


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.layer.load_state_dict(init)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def configure_optimizers(self) -> None:
        return None  # the DeepSpeed config's optimizer


def fit(torch_adam: bool) -> tuple[str, dict[str, torch.Tensor]]:
    params = {"lr": LR, "weight_decay": WD, "torch_adam": torch_adam}
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": params},
        "zero_optimization": {"stage": 0},
    }
    model = Model()
    trainer = L.Trainer(
        accelerator="hpu",
        devices=1,
        strategy=HPUDeepSpeedStrategy(config=config),
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=4))
    name = type(trainer.strategy.deepspeed_engine.optimizer).__name__
    return name, {k: v.detach().cpu() for k, v in model.layer.state_dict().items()}


fused_name, fused = fit(False)
torch_name, reference = fit(True)
print(
    "REPORT",
    json.dumps(
        {
            "optimizers": [fused_name, torch_name],
            "moved": min(float((fused[k] - init[k]).abs().max()) for k in init),
            "max_diff": max(float((fused[k] - reference[k]).abs().max()) for k in init),
        }
    ),
)
