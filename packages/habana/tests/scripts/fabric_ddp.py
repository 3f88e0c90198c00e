"""Child script: two Fabric processes over emulated HCCL; each rank trains a step and writes what it saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from lightning.fabric import Fabric

from lightning_accel.habana.fabric import HPUAccelerator, HPUParallelStrategy


def main() -> None:
    out = Path(sys.argv[1])
    strategy = HPUParallelStrategy(parallel_devices=[torch.device("hpu")] * 2)
    fabric = Fabric(accelerator=HPUAccelerator(), strategy=strategy, devices=2)
    fabric.launch()
    fabric.seed_everything(3)
    model, optimizer = fabric.setup(torch.nn.Linear(4, 1), torch.optim.SGD(torch.nn.Linear(4, 1).parameters(), 0.1))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.full((8, 4), float(fabric.global_rank + 1), device=fabric.device)
    loss = model(x).pow(2).mean()
    fabric.backward(loss)
    optimizer.step()
    value = torch.tensor([float(fabric.global_rank + 1)], device=fabric.device)
    result = {
        "backend": dist.get_backend(),
        "devices": [x.device.type, model.weight.device.type],
        "sum": fabric.all_reduce(value.clone(), reduce_op="sum").item(),
        "mean": fabric.all_reduce(value.clone(), reduce_op="mean").item(),
        "min": fabric.all_reduce(value.clone(), reduce_op="min").item(),
        "weight": model.weight.detach().cpu().flatten().tolist(),
    }
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
