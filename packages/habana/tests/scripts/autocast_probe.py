"""Child script of the precision tests: the dtype each probed operator runs in under ``torch.autocast("hpu")``.

The SDK reads its autocast lists once, when it loads, so each list setting needs a fresh process:

* ``python autocast_probe.py env``: lists from the environment the process started with; prints the probe's dtypes,
  then shows that changing the variables afterwards changes nothing.
* ``python autocast_probe.py plugin LOWER FP32`` (start it with ``PT_HPU_AUTOLOAD=0``, so that the SDK does not load
  at ``import torch``): builds ``HPUPrecisionPlugin`` with the two files before the SDK loads, then trains one step
  with the Trainer and prints the dtypes seen in ``training_step``.

The last line of output is a JSON object.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F

LIST_VARIABLES = ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", "PT_HPU_AUTOCAST_FP32_OPS_LIST")


def probe(device: torch.device | str = "hpu") -> dict[str, str]:
    """Run each probed operator on float32 inputs (some on bfloat16) and return the dtype it produced, by name.

    Call it inside ``torch.autocast(device_type="hpu", dtype=torch.bfloat16)`` (or a plugin's forward context).
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=generator).to(device)
    w = torch.randn(4, 16, generator=generator).to(device)
    y = torch.arange(8).remainder(16).to(device)
    results = {
        "linear": F.linear(x, w),
        "matmul": x @ w.T,
        "mm": torch.mm(x, w.t()),
        "softmax": torch.softmax(x, dim=-1),
        "log_softmax": torch.log_softmax(x, dim=-1),
        "cross_entropy_loss": F.cross_entropy(x, y),
        "cross_entropy_loss_of_bf16": F.cross_entropy(x.bfloat16(), y),
        "layer_norm": F.layer_norm(x, (16,)),
        "mul": x * x,
        "add_bf16_fp32": x.bfloat16() + x,
        "exp": torch.exp(x),
        "relu": torch.relu(x),
        "relu_of_bf16": torch.relu(x.bfloat16()),
    }
    return {name: str(value.dtype).removeprefix("torch.") for name, value in results.items()}


def _env() -> dict[str, Any]:
    import habana_frameworks.torch  # noqa: F401  (loaded already in eager mode; loads it otherwise)

    with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
        first = probe()
    for variable in LIST_VARIABLES:
        os.environ[variable] = os.devnull  # read at load only: changing them now must change nothing
    with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
        again = probe()
    return {"dtypes": first, "unchanged_after_load": again == first}


def _plugin(lower: str, fp32: str) -> dict[str, Any]:
    from lightning.pytorch import LightningModule, Trainer
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_accel.habana import HPUPrecisionPlugin

    loaded_before = "habana_frameworks.torch" in sys.modules
    plugin = HPUPrecisionPlugin("bf16-mixed", bf16_file_path=lower, fp32_file_path=fp32)
    exported = {variable: os.environ.get(variable) for variable in LIST_VARIABLES}
    seen: dict[str, str] = {}

    class Probe(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.update(probe(self.device))
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=1,
        plugins=[plugin],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = TensorDataset(torch.randn(8, 16), torch.arange(8).remainder(4))
    trainer.fit(Probe(), DataLoader(data, batch_size=8))
    return {"loaded_before_plugin": loaded_before, "exported": exported, "dtypes": seen}


if __name__ == "__main__":
    mode = sys.argv[1]
    result = _env() if mode == "env" else _plugin(sys.argv[2], sys.argv[3])
    print(json.dumps(result))
