"""The DeepSpeed-on-HPU self-test checks: each ZeRO stage trains the generated-data classifier on one HPU.

One HPU is enough to run every stage's code path (partitioning over a world of one); DDP-style runs over several HPUs
are the habana checks' job. The offload check steps torch's Adam on the host copy DeepSpeed keeps there
(``zero_force_ds_cpu_optimizer=False``): DeepSpeed's own CPU Adam would first build its ``cpu_adam`` op, which takes
minutes on a small machine; the deepspeed-hpu test suite trains with it.
"""

from __future__ import annotations

from typing import Any

from lightning_accel.core.selftest.checks import CheckContext, CheckFailed
from lightning_accel.core.selftest.workloads import classifier, loader

__all__ = ["offload", "zero1", "zero2", "zero3"]

MAX_LOSS = 0.3


def _train(strategy: str, host_adam: bool = False) -> str:
    import torch
    from lightning.pytorch import Trainer, seed_everything

    seed_everything(0)
    model = classifier()
    if host_adam:

        def configure_optimizers() -> Any:
            return torch.optim.Adam(model.parameters(), lr=0.01)

        model.configure_optimizers = configure_optimizers
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        strategy=strategy,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    deepspeed: Any = trainer.strategy
    if host_adam:  # DeepSpeed accepts a torch optimizer for offloaded states only when told so
        deepspeed.config["zero_force_ds_cpu_optimizer"] = False
    trainer.fit(model, loader())
    config = deepspeed.config["zero_optimization"]
    loss = float(trainer.callback_metrics["train_loss"])
    if not loss < MAX_LOSS:
        raise CheckFailed(f"{strategy}: final training loss {loss:.3f}, expected below {MAX_LOSS}")
    optimizer = type(deepspeed.deepspeed_engine.optimizer).__name__
    offload = config.get("offload_optimizer", {}).get("device", "none")
    return f"ZeRO stage {config['stage']}, {optimizer}, optimizer offload {offload}; final loss {loss:.3f}"


def zero1(ctx: CheckContext) -> str:
    """ZeRO stage 1: optimizer states partitioned."""
    return _train("hpu_deepspeed_stage_1")


def zero2(ctx: CheckContext) -> str:
    """ZeRO stage 2: optimizer states and gradients partitioned."""
    return _train("hpu_deepspeed_stage_2")


def zero3(ctx: CheckContext) -> str:
    """ZeRO stage 3: parameters partitioned too."""
    return _train("hpu_deepspeed_stage_3")


def offload(ctx: CheckContext) -> str:
    """ZeRO-Offload: the optimizer states live in host memory and the step runs there."""
    return _train("hpu_deepspeed_stage_2_offload", host_adam=True)
