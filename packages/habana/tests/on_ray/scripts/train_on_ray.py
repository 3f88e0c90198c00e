"""Lightning on two HPUs through Ray Train, as Ray's docs show Lightning; each mode starts its own local Ray cluster.

usage: train_on_ray.py MODE OUT   (MODE: whole | resume | crash | zero2)

- ``whole``: two epochs of four steps per worker; checkpoints reported through ``RayTrainReportCallback``; the path
  of the checkpoint of the first epoch goes to ``OUT/first_epoch_checkpoint.txt``.
- ``resume``: a new ``TorchTrainer`` whose training function restores the checkpoint that ``whole`` wrote after its
  first epoch (passed in ``train_loop_config``: Ray Train v2 refuses ``resume_from_checkpoint``) and trains the rest.
- ``crash``: like ``whole`` under ``FailureConfig(max_failures=1)``; on the first attempt rank 1 is killed by SIGKILL
  in the middle of the second epoch. Ray restarts the workers and the training function resumes from
  ``ray.train.get_checkpoint()``, the last reported checkpoint.
- ``zero2``: like ``whole``, with DeepSpeed ZeRO stage 2 (``RayHPUDeepSpeedStrategy``) instead of DDP.

Each worker writes what it saw to ``OUT/<MODE>-rank<R>-attempt<A>.pt``: the final weights, the backend, the device
types of the batch and the module inside ``training_step``, the steps it trained and the devices it could see.
``OUT/<MODE>-result.txt`` holds the run's outcome: ``ok`` or the error's type and message;
``OUT/<MODE>-resources.json`` what ``ray.cluster_resources()`` was before the run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray
import ray.train
from ray.train import CheckpointConfig, CheckpointConsistencyMode, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

MODE, OUT = sys.argv[1], Path(sys.argv[2]).resolve()
EPOCHS, BATCHES, CRASH_STEP = 2, 4, 6  # step 6: the third batch of the second epoch


def train_func(config: dict[str, Any]) -> None:
    out, mode = Path(config["out"]), config["mode"]
    if mode == "zero2":
        # Before anything imports deepspeed, as a user's training function would.
        from lightning_accel.deepspeed_hpu.ray import RayHPUDeepSpeedStrategy

    import habana_frameworks.torch.hpu as hpu
    import torch
    import torch.distributed as dist
    from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
    from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_accel.habana.ray import RayHPUStrategy

    context = ray.train.get_context()
    rank = context.get_world_rank()
    # RayTrainReportCallback stages each checkpoint in the system's temporary folder and leaves the folder there.
    staging = out / f"staging-rank{rank}"
    staging.mkdir(exist_ok=True)
    tempfile.tempdir = str(staging)
    crash_marker = out / "crashed-once"
    attempt = 1 if crash_marker.exists() else 0

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
            self.seen: set[tuple[str, str, str]] = set()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            self.seen.add((x.device.type, self.device.type, str(dist.get_backend())))
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    class CrashAndCount(Callback):
        def __init__(self) -> None:
            self.steps_run = 0

        def on_train_batch_start(self, trainer: Trainer, *args: Any) -> None:
            if mode == "crash" and attempt == 0 and rank == 1 and trainer.global_step == CRASH_STEP:
                # Ray's controller records a report when it next polls the workers; a worker killed before that
                # loses it. Wait until the first epoch's checkpoint is committed, as it is long before a real crash.
                committed = ray.train.get_all_reported_checkpoints(consistency_mode=CheckpointConsistencyMode.COMMITTED)
                assert [c.metrics["epoch"] for c in committed] == [0], committed
                crash_marker.write_text("killed")
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, *args: Any) -> None:
            self.steps_run += 1

    seed_everything(0)
    x = torch.randn(BATCHES * 2 * 8, 16, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x[:, :4].argmax(dim=1)), batch_size=8)  # 4 batches per worker
    counter = CrashAndCount()
    trainer = Trainer(
        accelerator="hpu",
        devices="auto",
        strategy=RayHPUDeepSpeedStrategy(stage=2) if mode == "zero2" else RayHPUStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback(), counter],
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer = prepare_trainer(trainer)
    model = Model()
    checkpoint = config.get("checkpoint") or ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            trainer.fit(model, loader, ckpt_path=str(Path(directory) / RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, loader)
    torch.save(
        {
            "weights": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "seen": sorted(model.seen),
            "steps_run": counter.steps_run,
            "visible_hpus": hpu.device_count(),
            "visible_modules": os.environ.get("HABANA_VISIBLE_MODULES"),
            "root_device": str(trainer.strategy.root_device),
        },
        out / f"{mode}-rank{rank}-attempt{attempt}.pt",
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(session_dir: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    # A cluster of this machine only, without dashboard.
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        dashboard_port=_free_port(),  # Ray's head still serves its state API there (8265 by default)
        _temp_dir=session_dir,
        log_to_driver=False,
    )
    # What Ray counted on this node before the run: its "HPU" resource and the node's accelerator label.
    (OUT / f"{MODE}-resources.json").write_text(json.dumps(ray.cluster_resources()))
    config: dict[str, Any] = {"out": str(OUT), "mode": MODE}
    failure = FailureConfig(max_failures=1 if MODE == "crash" else 0)
    if MODE == "resume":
        config["checkpoint"] = ray.train.Checkpoint(path=(OUT / "first_epoch_checkpoint.txt").read_text())
    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"HPU": 1, "CPU": 1}),
        torch_config=TorchConfig(backend="hccl"),
        run_config=RunConfig(
            name=MODE,
            storage_path=str(OUT / "storage"),
            failure_config=failure,
            checkpoint_config=CheckpointConfig(num_to_keep=None),
        ),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # the outcome is what the test reads
        (OUT / f"{MODE}-result.txt").write_text(f"{type(exc).__name__}: {exc}")
        return
    finally:
        ray.shutdown()
    if MODE == "whole":
        first = [c for c, metrics in result.best_checkpoints if metrics["epoch"] == 0]
        (OUT / "first_epoch_checkpoint.txt").write_text(first[0].path)
    (OUT / f"{MODE}-result.txt").write_text("ok")


if __name__ == "__main__":
    # Ray's session files go to a short temporary folder (its socket paths must stay under the OS limit), removed
    # afterwards; a worker that is still shutting down may hold a file there.
    with tempfile.TemporaryDirectory(prefix="ray-", ignore_cleanup_errors=True) as session_dir:
        main(session_dir)
