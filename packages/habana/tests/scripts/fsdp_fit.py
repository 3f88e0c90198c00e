"""Child script of the FSDP tests: train the digits classifier with FSDP on two emulated HPUs, save, resume.

It selects everything by name, as a user script that imports only lightning does. ``--sharded`` builds a strategy
instance instead, Lightning's own ``FSDPStrategy``, for ``state_dict_type="sharded"``; ``--flat`` builds
``HPUFSDPStrategy(use_orig_params=False)`` with full checkpoints. Each rank writes what it saw to ``rank<N>.pt``.
Lightning's launcher re-runs this file for the second local process, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from _habana_helpers import digits_classifier, digits_loaders
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything


def _local_shards(trainer: Trainer) -> list[torch.Tensor]:
    # The FSDP module's: with use_orig_params=False the LightningModule's own parameters are gone between steps.
    return [p.detach().float().cpu().clone() for p in trainer.model.parameters()]


class _Record(Callback):
    """What one run saw: the local shard sizes, where the parameters live, the weights at its start and end."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        optimizer = trainer.optimizers[0]
        steps = [float(s["step"]) for s in optimizer.state.values() if "step" in s]
        self.seen.update(
            start_step=trainer.global_step,
            start_shards=_local_shards(trainer),
            start_optimizer_steps=steps,
        )

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if "devices" not in self.seen:
            self.seen["devices"] = [batch[0].device.type, next(pl_module.parameters()).device.type]
            self.seen["local_numel"] = sum(p.numel() for p in trainer.model.parameters())

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.seen.update(end_step=trainer.global_step, end_shards=_local_shards(trainer))


def _trainer(strategy: Any, epochs: int, record: _Record, root: Path) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        precision="bf16-mixed",
        max_epochs=epochs,
        limit_train_batches=8,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=root,
        callbacks=[record],
    )


def _strategy(sharded: bool, flat: bool) -> Any:
    from lightning_accel.habana import HPUFSDPStrategy

    if flat:
        return HPUFSDPStrategy(state_dict_type="full", use_orig_params=False)
    if not sharded:
        return "hpu_fsdp"
    from lightning.pytorch.strategies import FSDPStrategy

    # Lightning's own class, as a GPU script builds it: on HPUs it becomes HPUFSDPStrategy with these arguments.
    return FSDPStrategy(state_dict_type="sharded", auto_wrap_policy={torch.nn.Linear})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sharded", action="store_true", help="state_dict_type='sharded' (a strategy instance)")
    parser.add_argument("--flat", action="store_true", help="use_orig_params=False, state_dict_type='full'")
    args = parser.parse_args()
    seed_everything(7)
    train, val = digits_loaders()

    first = _Record()
    trainer = _trainer(_strategy(args.sharded, args.flat), 3, first, args.out)
    model = digits_classifier()
    trainer.fit(model, train, val)
    checkpoint = args.out / "fsdp.ckpt"
    trainer.save_checkpoint(checkpoint)
    first_val_acc = float(trainer.callback_metrics["val_acc"])
    # A later stage of the same Trainer from the checkpoint just written (Lightning's own FSDP strategy fails here
    # when the model was wrapped whole, Lightning issue #20373).
    validated = trainer.validate(model, val, ckpt_path=checkpoint, verbose=False)[0]["val_acc"]
    plugin = trainer.strategy.precision_plugin
    config = plugin.mixed_precision_config
    result: dict[str, Any] = {
        "first": first.seen,
        "first_val_acc": first_val_acc,
        "validated_val_acc": validated,
        "strategy": type(trainer.strategy).__name__,
        "state_dict_type": "sharded" if checkpoint.is_dir() else "full",
        "plugin": type(plugin).__name__,
        "mixed_precision": None if config is None else [config.param_dtype, config.reduce_dtype, config.buffer_dtype],
        "total_numel": sum(p.numel() for p in digits_classifier().parameters()),
        "backend": dist.get_backend(),
    }

    second = _Record()
    resumed = _trainer(_strategy(args.sharded, args.flat), 4, second, args.out)
    resumed.fit(digits_classifier(), train, val, ckpt_path=checkpoint)
    result.update(second=second.seen, second_val_acc=float(resumed.callback_metrics["val_acc"]))
    torch.save(result, args.out / f"rank{resumed.global_rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
