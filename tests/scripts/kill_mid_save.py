"""Save a checkpoint, then die by SIGKILL in the middle of overwriting it; or read back what was left.

usage:
    kill_mid_save.py save STRATEGY CKPT GOOD KILL_AT   # GOOD: where the first checkpoint's weights are recorded,
                                                       # GOOD.new: the weights the killed save was writing
    kill_mid_save.py load STRATEGY CKPT OUT            # OUT: where the weights read back from CKPT are written

KILL_AT is ``write:N`` (the N-th ``torch.save`` of the second save writes half of its bytes, then the process is
killed), ``rename:N`` / ``replace:N`` (killed just before the N-th ``os.rename`` / ``os.replace`` of that save) or
``swap:N`` (just before the N-th rename of the checkpoint swap, see ``lightning_accel.core.checkpoint_swap``).
The script imports only Lightning (the strategy comes from its registered name), except for ``hpu_fsdp:sharded``.
``fabric:NAME`` runs the same with Fabric: ``fabric.save`` twice from a loop, ``fabric.load`` to read back; there the
weights are recorded as the model's output on a fixed input (the sharded strategies' own state dicts hold shards).
"""

from __future__ import annotations

import io
import os
import signal
import sys
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.05)


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=generator)
    return DataLoader(TensorDataset(x, (x[:, :4].argmax(dim=1))), batch_size=16)


def host_weights(module: LightningModule) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu().clone() for name, value in module.state_dict().items()}


def die_at(kill_at: str) -> None:
    """Make the process kill itself at the ``kill_at`` step of what follows."""
    kind, _, number = kill_at.partition(":")
    calls = {"count": 0}

    def due() -> bool:
        calls["count"] += 1
        return calls["count"] >= int(number)

    def die() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "write":
        real_save = torch.save

        def torn_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            if not due():
                real_save(obj, f, *args, **kwargs)
                return
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            handle = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
            handle.write(data[: len(data) // 2])
            handle.flush()
            die()

        torch.save = torn_save
    elif kind == "swap":
        # Counted inside the checkpoint swap only: the writers' own renames (torch.distributed.checkpoint has some)
        # must not shift the kill point.
        from lightning_accel.core import checkpoint_swap

        real_swap, real_rename = checkpoint_swap.swap_in, os.rename

        def dying_rename(*args: Any, **kwargs: Any) -> Any:
            if due():
                die()
            return real_rename(*args, **kwargs)

        def swap_in(target: Any) -> None:
            os.rename = dying_rename
            try:
                real_swap(target)
            finally:
                os.rename = real_rename

        checkpoint_swap.swap_in = swap_in
    elif kind in ("rename", "replace"):
        real = getattr(os, kind)

        def dying(*args: Any, **kwargs: Any) -> Any:
            if due():
                die()
            return real(*args, **kwargs)

        setattr(os, kind, dying)
    else:
        raise SystemExit(f"KILL_AT={kill_at!r}: expected write:N, rename:N, replace:N or swap:N")


class SaveTwice(Callback):
    def __init__(self, ckpt: str, good: str, kill_at: str) -> None:
        self.ckpt, self.good, self.kill_at = ckpt, good, kill_at

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.ckpt)
            if trainer.is_global_zero:
                torch.save(host_weights(pl_module), self.good)
            return
        if trainer.is_global_zero:
            torch.save(host_weights(pl_module), self.good + ".new")
        die_at(self.kill_at)
        trainer.save_checkpoint(self.ckpt)
        raise SystemExit(f"the second save finished: {self.kill_at} never came")


def trainer(name: str, **kwargs: Any) -> Trainer:
    strategy: Any = name
    if name == "hpu_fsdp:sharded":
        # The one case that needs a class: a registered name cannot carry state_dict_type.
        from lightning_accel.habana import HPUFSDPStrategy

        strategy = HPUFSDPStrategy(state_dict_type="sharded")
    return Trainer(
        accelerator="ipu" if name == "ipu_strategy" else "hpu",
        devices=int(os.environ.get("DEVICES", "1")),
        strategy=strategy,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def fabric_strategy(name: str) -> Any:
    if name == "hpu_model_parallel":
        from lightning.fabric.strategies import ModelParallelStrategy
        from torch.distributed.fsdp import fully_shard

        def parallelize(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
            fully_shard(module, mesh=mesh["data_parallel"])
            return module

        # Lightning's class: the HPU plugin rebuilds it as its own with the same arguments.
        devices = int(os.environ.get("DEVICES", "1"))
        return ModelParallelStrategy(parallelize, data_parallel_size=devices, tensor_parallel_size=1)
    return name


def fabric_main(mode: str, name: str, ckpt: str, out: str, kill_at: str = "") -> None:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="hpu", devices=int(os.environ.get("DEVICES", "1")), strategy=fabric_strategy(name))
    fabric.launch()
    fabric.seed_everything(0)
    module = fabric.setup_module(torch.nn.Linear(16, 4))
    optimizer = fabric.setup_optimizers(torch.optim.Adam(module.parameters(), lr=0.05))
    state = {"model": module, "optimizer": optimizer}
    probe = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))

    def fingerprint(path: str) -> None:
        from torch.distributed.fsdp import FSDPModule

        with torch.no_grad():
            output = module(probe.to(fabric.device)).cpu()
        for unit in module.modules():
            if isinstance(unit, FSDPModule):
                unit.reshard()  # FSDP2 keeps the root unsharded after a forward without backward; saving needs shards
        if fabric.is_global_zero:
            torch.save({"output": output}, path)

    if mode == "load":
        fabric.load(ckpt, state)
        fingerprint(out)
        return
    x, y = next(iter(loader()))
    for save in range(2):
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(module(x.to(fabric.device)), y.to(fabric.device))
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if save == 0:
            fabric.save(ckpt, state)
            fingerprint(out)
    fingerprint(out + ".new")
    die_at(kill_at)
    fabric.save(ckpt, state)
    raise SystemExit(f"the second save finished: {kill_at} never came")


def main() -> None:
    mode, strategy, ckpt, out = sys.argv[1:5]
    if strategy.startswith("fabric:"):
        fabric_main(mode, strategy.removeprefix("fabric:"), ckpt, out, *sys.argv[5:6])
        return
    torch.manual_seed(0)
    model = Model()
    if mode == "save":
        trainer(strategy, max_epochs=2, callbacks=[SaveTwice(ckpt, out, sys.argv[5])]).fit(model, loader())
        return
    loaded = trainer(strategy)
    loaded.validate(model, loader(), ckpt_path=ckpt, verbose=False)
    if loaded.is_global_zero:
        torch.save(host_weights(model), out)


if __name__ == "__main__":
    main()
