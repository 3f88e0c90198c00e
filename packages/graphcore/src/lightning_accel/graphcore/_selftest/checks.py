"""The IPU self-test checks: each trains the generated-data classifier through poptorch and verifies the result.

They use the public API only (``accelerator="ipu"``, ``IPUStrategy``, poptorch's block annotations through the seam)
and never ask whether poptorch is emulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_accel.core.selftest.checks import CheckContext, CheckFailed, CheckSkipped
from lightning_accel.core.selftest.workloads import accuracy, classifier, loader

__all__ = ["checkpoint", "device_iterations", "fit", "pipeline", "replication"]

MIN_ACCURACY = 0.9
_QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _fit(model: Any, epochs: int = 2, ckpt_path: Path | None = None, **kwargs: Any) -> Any:
    from lightning.pytorch import Trainer

    options: dict[str, Any] = {"accelerator": "ipu", "devices": 1, "enable_checkpointing": False, **_QUIET}
    options.update(kwargs)
    trainer = Trainer(max_epochs=epochs, **options)
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    return trainer


def _require_accuracy(model: Any, what: str) -> float:
    score = accuracy(model)
    if score < MIN_ACCURACY:
        raise CheckFailed(f"{what}: accuracy {score:.3f}, expected at least {MIN_ACCURACY}")
    return score


def _seeded_classifier(**kwargs: Any) -> Any:
    from lightning.pytorch import seed_everything

    seed_everything(0)
    return classifier(**kwargs)


def fit(ctx: CheckContext) -> str:
    """One IPU with the default strategy (``ipu_strategy``)."""
    model = _seeded_classifier()
    trainer = _fit(model)
    score = _require_accuracy(model, "fit on one IPU")
    return f"accuracy {score:.3f} after {trainer.global_step} host calls ({type(trainer.strategy).__name__})"


def device_iterations(ctx: CheckContext) -> str:
    """``IPUStrategy(device_iterations=4)``: each host call runs four batches, each with its weight update."""
    from lightning_accel.graphcore import IPUStrategy

    model = _seeded_classifier()
    trainer = _fit(model, strategy=IPUStrategy(device_iterations=4))
    iterations = trainer.strategy.training_opts.device_iterations
    if iterations != 4:
        raise CheckFailed(f"training_opts.device_iterations is {iterations}, expected 4")
    expected_calls = 2 * (512 // (32 * 4))
    if trainer.global_step != expected_calls:
        raise CheckFailed(f"{trainer.global_step} host calls, expected {expected_calls} (16 batches / 4 per call x 2)")
    score = _require_accuracy(model, "device_iterations=4")
    return f"{trainer.global_step} host calls of 4 batches; accuracy {score:.3f}"


def replication(ctx: CheckContext) -> str:
    """``devices=2``: two replicas, each on its own IPU, train one set of weights."""
    if ctx.devices < 2:
        raise CheckSkipped(f"replication needs 2 IPUs; {ctx.devices} available")
    model = _seeded_classifier()
    trainer = _fit(model, devices=2)
    replicas = trainer.strategy.training_opts.replication_factor
    if replicas != 2:
        raise CheckFailed(f"training_opts.replication_factor is {replicas}, expected 2")
    score = _require_accuracy(model, "two replicas")
    return f"replication factor 2, {trainer.global_step} host calls; accuracy {score:.3f}"


def pipeline(ctx: CheckContext) -> str:
    """Two stages (``poptorch.BeginBlock`` on IPU 0 and 1); training a 2-stage pipeline accumulates >= 3 batches."""
    from lightning_accel.graphcore.sdk import poptorch

    if ctx.devices < 2:
        raise CheckSkipped(f"a two-stage pipeline needs 2 IPUs; {ctx.devices} available")
    model = _seeded_classifier(lr=0.2)
    model.net[0] = poptorch.BeginBlock(model.net[0], ipu_id=0)
    model.net[2] = poptorch.BeginBlock(model.net[2], ipu_id=1)
    trainer = _fit(model, epochs=4, accumulate_grad_batches=4)
    score = _require_accuracy(model, "two-stage pipeline")
    return f"2 stages, gradient accumulation 4, {trainer.global_step} host calls; accuracy {score:.3f}"


def checkpoint(ctx: CheckContext) -> str:
    """Train, save, resume in a new Trainer from the file: the step count continues and the weights are restored."""
    import torch
    from lightning.pytorch import Callback
    from lightning.pytorch.callbacks import ModelCheckpoint

    saver = ModelCheckpoint(dirpath=ctx.workdir, filename="last")
    _fit(_seeded_classifier(), epochs=1, enable_checkpointing=True, callbacks=[saver])
    path = Path(saver.best_model_path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    restored: dict[str, bool] = {}

    class Compare(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            for name, value in pl_module.state_dict().items():
                restored[name] = torch.equal(value.detach().to("cpu"), saved["state_dict"][name])

    second = classifier()
    trainer = _fit(second, epochs=2, callbacks=[Compare()], ckpt_path=path)
    if not restored or not all(restored.values()):
        raise CheckFailed(f"weights not restored from {path.name}: {[n for n, ok in restored.items() if not ok]}")
    if trainer.global_step != 2 * saved["global_step"]:
        raise CheckFailed(f"resumed at step {saved['global_step']} and ended at {trainer.global_step}, expected x2")
    score = _require_accuracy(second, "resumed training")
    return f"saved at step {saved['global_step']}, resumed to {trainer.global_step}, accuracy {score:.3f}"
