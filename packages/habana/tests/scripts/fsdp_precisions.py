"""Child script of the FSDP precision tests: each precision trained with FSDP on two emulated HPUs.

Trainer (default): the digits classifier, one FSDP unit, is trained once per precision in ``PRECISIONS``; then a
``"16-mixed"`` run (``HYBRID_SHARD`` over a ``device_mesh=(1, 2)`` tuple) with a scaler of ``init_scale=1024`` whose
loss, at step ``OVERFLOW_STEP``, gains a term that overflows the float16 gradient of the last layer's bias only:
those elements sit in rank 1's shard of the flat parameter, so only rank 1 finds the inf. ``--fabric --precision P``
trains with Fabric in one precision.

Each rank writes to ``rank<N>.pt``, per run: the dtype of the sharded parameters, the dtype of the gathered weight and
of the output of the last layer inside the forward pass, the device memory in use at the start of the second step
(shards, gradients and Adam's state) and its peak during that step (the emulator's exact accounting), the validation
accuracy, each step's share of the squared gradient norm after Lightning clipped it (``gradient_clip_val=CLIP``),
and for the overflow run the scale and whether the rank's shard changed at each step.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from _habana_helpers import digits_loaders
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything

PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed")
OVERFLOW_STEP = 3
CLIP = 0.5


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )


class _Seen:
    """What the last layer sees inside the forward pass (a forward hook: FSDP has gathered the weights then)."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.values: dict[str, Any] = {}
        head.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        self.values.setdefault("forward_weight_dtype", module.weight.dtype)
        self.values.setdefault("forward_output_dtype", output.dtype)


class _Classifier(LightningModule):
    def __init__(self, overflow_at: int | None = None) -> None:
        super().__init__()
        self.overflow_at = overflow_at
        self.net = _net()
        self.seen = _Seen(self.net[-1])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        if batch_idx == self.overflow_at:
            # Scaled by 1024, the bias gradient is about 1e6: past float16's largest value, so inf in the bias only.
            loss = loss + 1e3 * self.net[-1].bias.float().sum()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        optimizer.register_step_pre_hook(self._record_clipped)
        return optimizer

    def _record_clipped(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        # After Lightning clipped (and unscaled): this rank's share of the squared gradient norm.
        grads = [p.grad.float() for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        squares = sum(float(g.pow(2).sum()) for g in grads)
        self.seen.values.setdefault("clipped_squares", []).append(squares)


def _shards(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().float().cpu().clone() for p in module.parameters()]


class _Record(Callback):
    def __init__(self) -> None:
        self.seen: dict[str, Any] = {"scales": [], "shard_changed": []}
        self._before: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.seen.setdefault("shard_dtype", next(pl_module.parameters()).dtype)
        self._before = _shards(pl_module)
        if trainer.global_step == 1 and "steady_bytes" not in self.seen:
            torch.hpu.synchronize()
            torch.hpu.reset_peak_memory_stats()
            self.seen["steady_bytes"] = torch.hpu.memory_allocated()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if "peak_bytes" not in self.seen and "steady_bytes" in self.seen:
            self.seen["peak_bytes"] = torch.hpu.max_memory_allocated()
        after = _shards(pl_module)
        self.seen["shard_changed"].append(not all(torch.equal(a, b) for a, b in zip(self._before, after, strict=True)))
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.seen["scales"].append(None if scaler is None else float(scaler.get_scale()))


def _fit(precision: str, root: Path, overflow: bool = False) -> dict[str, Any]:
    gc.collect()
    seed_everything(3)
    record = _Record()
    record.seen["baseline_bytes"] = torch.hpu.memory_allocated()
    plugins: list[Any] = []
    strategy: Any = "fsdp"
    if overflow:
        from lightning_accel.habana import HPUFSDPPrecision, HPUFSDPStrategy

        # A user's scaler: its settings carry over to the HPU one. HYBRID_SHARD over a (replicas, shards) mesh that
        # the strategy builds on the HPUs: one replica of two shards.
        plugins = [HPUFSDPPrecision("16-mixed", scaler=torch.amp.GradScaler("hpu", init_scale=1024.0))]
        strategy = HPUFSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(1, 2))
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        precision=None if overflow else precision,  # type: ignore[arg-type]
        plugins=plugins,
        max_epochs=1 if overflow else 3,
        gradient_clip_val=None if overflow else CLIP,
        limit_train_batches=OVERFLOW_STEP + 3 if overflow else 8,
        limit_val_batches=0 if overflow else None,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=root,
        callbacks=[record],
    )
    model = _Classifier(OVERFLOW_STEP if overflow else None)
    train, val = digits_loaders()
    trainer.fit(model, train, val)
    config = trainer.strategy.precision_plugin.mixed_precision_config
    mesh = trainer.strategy.kwargs.get("device_mesh")
    result = dict(record.seen, **model.seen.values)
    result.update(
        strategy=type(trainer.strategy).__name__,
        scaler=type(getattr(trainer.precision_plugin, "scaler", None)).__name__,
        mixed_precision=None if config is None else [config.param_dtype, config.reduce_dtype, config.buffer_dtype],
        val_acc=None if overflow else float(trainer.callback_metrics["val_acc"]),
        rank=trainer.global_rank,
        mesh=None if mesh is None else (mesh.device_type, tuple(mesh.shape)),
    )
    return result


def _fabric(precision: str) -> dict[str, Any]:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="hpu", devices=2, strategy="fsdp", precision=precision)  # type: ignore[arg-type]
    fabric.launch()
    fabric.seed_everything(3)
    train, _ = digits_loaders()
    train = fabric.setup_dataloaders(train)
    with fabric.init_module():
        net = _net()
    made_dtype = next(net.parameters()).dtype
    seen = _Seen(net[-1])
    model = fabric.setup_module(net)
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=1e-2))
    losses = []
    for _ in range(2):
        for x, y in train:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
    scaler = getattr(fabric.strategy.precision, "scaler", None)
    return dict(
        seen.values,
        made_dtype=made_dtype,
        shard_dtype=next(model.parameters()).dtype,
        plugin=type(fabric.strategy.precision).__name__,
        scaler=type(scaler).__name__,
        first_loss=sum(losses[:5]) / 5,
        last_loss=sum(losses[-5:]) / 5,
        rank=fabric.global_rank,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fabric", action="store_true")
    parser.add_argument("--precision", default="bf16-true")
    args = parser.parse_args()
    if args.fabric:
        result = _fabric(args.precision)
        rank = result["rank"]
    else:
        runs = {precision: _fit(precision, args.out) for precision in PRECISIONS}
        runs["overflow"] = _fit("16-mixed", args.out, overflow=True)
        result = runs
        rank = runs["overflow"]["rank"]
    torch.save(result, args.out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
