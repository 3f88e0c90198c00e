"""Child script of the FSDP tests: the device memory a full checkpoint takes, on two emulated HPUs.

A model of several FSDP units (each ``Linear`` is one) trains a step with Adam, then saves a full checkpoint through
the Trainer (``--fabric``: through Fabric). Each rank writes to ``rank<N>.pt`` its device memory in use before the
save, the peak during it (the emulator's exact accounting), the bytes of the largest unit's gathered flat parameter
and of the whole model, and after a resume from the file whether the weights are those saved.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from lightning.pytorch import LightningModule, Trainer, seed_everything

WIDTHS = (96, 128, 160, 128, 96)  # four units; the largest is Linear(128, 160)
WORLD_SIZE = 2


def _net() -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for n_in, n_out in itertools.pairwise(WIDTHS):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def _sizes() -> dict[str, int]:
    """Bytes of the whole float32 model and of the largest unit's full flat parameter (padded, as FSDP gathers it)."""
    units = [sum(p.numel() for p in m.parameters()) for m in _net() if isinstance(m, torch.nn.Linear)]
    padded = [-(-n // WORLD_SIZE) * WORLD_SIZE for n in units]
    return {"model_bytes": 4 * sum(units), "largest_unit_bytes": 4 * max(padded)}


class _Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def _data() -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(16, WIDTHS[0])), batch_size=4)


def _measure(save: Any) -> dict[str, int]:
    hpu = torch.hpu
    hpu.synchronize()
    hpu.reset_peak_memory_stats()
    before = hpu.memory_allocated()
    save()
    return {"before": before, "peak": hpu.max_memory_allocated(), "after": hpu.memory_allocated()}


def _flat(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().cpu().clone() for p in module.parameters()]


def _trainer(root: Path) -> Trainer:
    from lightning_accel.habana import HPUFSDPStrategy

    return Trainer(
        accelerator="hpu",
        devices=WORLD_SIZE,
        strategy=HPUFSDPStrategy(auto_wrap_policy={torch.nn.Linear}),
        max_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=root,
    )


def _with_trainer(out: Path) -> tuple[int, dict[str, Any]]:
    seed_everything(3)
    trainer = _trainer(out)
    model = _Model()
    trainer.fit(model, _data())
    checkpoint = out / "full.ckpt"
    memory = _measure(lambda: trainer.save_checkpoint(checkpoint))
    saved: dict[str, torch.Tensor] = {}
    model_only = _measure(lambda: saved.update(trainer.strategy.lightning_module_state_dict()))
    resumed = _trainer(out)
    resumed_model = _Model()
    resumed.fit(resumed_model, _data(), ckpt_path=checkpoint)  # max_steps reached: restores, trains no step
    loaded = resumed.strategy.lightning_module_state_dict()
    same = resumed.global_rank != 0 or all(torch.equal(saved[k], loaded[k]) for k in saved)
    result = {**memory, "model_peak": model_only["peak"], "saved_keys": len(saved), "resumed_same_weights": same}
    return trainer.global_rank, result


def _with_fabric(out: Path) -> tuple[int, dict[str, Any]]:
    from lightning_accel.habana.fabric import HPUFSDPStrategy

    strategy = HPUFSDPStrategy(state_dict_type="full", auto_wrap_policy={torch.nn.Linear})
    fabric = Fabric(accelerator="hpu", devices=WORLD_SIZE, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(3)
    model = fabric.setup_module(_net())
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=1e-3))
    for (x,) in _data():
        fabric.backward(model(x.to(fabric.device)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    checkpoint = out / "full_fabric.ckpt"
    memory = _measure(lambda: fabric.save(checkpoint, {"model": model, "optimizer": optimizer}))
    saved = _flat(model)
    fresh = fabric.setup_module(_net())
    fresh_optimizer = fabric.setup_optimizers(torch.optim.Adam(fresh.parameters(), lr=1e-3))
    fabric.load(checkpoint, {"model": fresh, "optimizer": fresh_optimizer})
    same = all(torch.equal(a, b) for a, b in zip(saved, _flat(fresh), strict=True))
    return fabric.global_rank, {**memory, "resumed_same_weights": same}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fabric", action="store_true")
    args = parser.parse_args()
    rank, result = (_with_fabric if args.fabric else _with_trainer)(args.out)
    torch.save({**result, **_sizes()}, args.out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
