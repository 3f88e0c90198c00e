"""Child script of the FSDP tests: the device memory a full checkpoint takes, on two emulated HPUs.

A model of several FSDP units (each ``Linear`` is one), made on the host, is set up by the strategy, trains a step
with Adam, then saves a full checkpoint through the Trainer (``--fabric``: through Fabric). Each rank writes to
``rank<N>.pt`` the peak of its device memory during the set-up, its device memory in use before each of several
saves and the peak during each (the emulator's exact accounting), the bytes of the largest unit's gathered flat
parameter, of its shards and of the whole model, and after a resume from the file whether the weights are those saved.
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
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything

WIDTHS = (96, 128, 160, 128, 128, 128, 160, 128, 96)  # eight units; the largest are Linear(128, 160)
WORLD_SIZE = 2


def _net() -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for n_in, n_out in itertools.pairwise(WIDTHS):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def _sizes() -> dict[str, int]:
    """Bytes of the whole float32 model, of a rank's shards of it and of the largest unit's full flat parameter.

    FSDP pads each unit's flat parameter to a multiple of the world size.
    """
    units = [sum(p.numel() for p in m.parameters()) for m in _net() if isinstance(m, torch.nn.Linear)]
    padded = [-(-n // WORLD_SIZE) * WORLD_SIZE for n in units]
    return {
        "model_bytes": 4 * sum(units),
        "shard_bytes": 4 * sum(padded) // WORLD_SIZE,
        "largest_unit_bytes": 4 * max(padded),
    }


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


SAVES = 3


def _measure(save: Any) -> dict[str, Any]:
    """The device memory in use before each of ``SAVES`` calls of ``save`` (after one unmeasured call) and its peaks.

    The first call is not measured: it can free memory the step left (FSDP's flat gradients under
    ``use_orig_params=True``, which Fabric sets), so its peak can hide what the gathering takes. Each later call is
    measured; the emulated HCCL's collectives run on gloo's worker threads, each of which drops the tensors of its
    last collective only when next scheduled, so on a loaded machine the memory before a call and its peak can include
    a finished collective's tensors: what the save itself holds is the smallest peak above the smallest ``before``.
    """
    hpu = torch.hpu
    save()
    before, peaks = [], []
    for _ in range(SAVES):
        hpu.synchronize()
        hpu.reset_peak_memory_stats()
        before.append(hpu.memory_allocated())
        save()
        peaks.append(hpu.max_memory_allocated())
    return {"before": before, "peak": peaks, "after": hpu.memory_allocated()}


def _flat(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().cpu().clone() for p in module.parameters()]


class _SetupMemory(Callback):
    """The device memory a rank's set-up took: from before FSDP wraps the model to the start of the fit."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        torch.hpu.reset_peak_memory_stats()
        self.before = torch.hpu.memory_allocated()

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.result = {"setup_before": self.before, "setup_peak": torch.hpu.max_memory_allocated()}


def _trainer(root: Path, callbacks: list[Callback] | None = None) -> Trainer:
    from lightning_accel.habana import HPUFSDPStrategy

    return Trainer(
        callbacks=callbacks,
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
    setup_memory = _SetupMemory()
    trainer = _trainer(out, [setup_memory])
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
    result = {
        **memory,
        **setup_memory.result,
        "model_before": model_only["before"],
        "model_peak": model_only["peak"],
        "saved_keys": len(saved),
        "resumed_same_weights": same,
    }
    return trainer.global_rank, result


def _with_fabric(out: Path) -> tuple[int, dict[str, Any]]:
    from lightning_accel.habana.fabric import HPUFSDPStrategy

    strategy = HPUFSDPStrategy(state_dict_type="full", auto_wrap_policy={torch.nn.Linear})
    fabric = Fabric(accelerator="hpu", devices=WORLD_SIZE, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(3)
    torch.hpu.reset_peak_memory_stats()
    setup_before = torch.hpu.memory_allocated()
    model = fabric.setup_module(_net())
    setup = {"setup_before": setup_before, "setup_peak": torch.hpu.max_memory_allocated()}
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
    return fabric.global_rank, {**memory, **setup, "resumed_same_weights": same}


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
