"""Plugin overhead: training throughput under accelerator="hpu" (emulated, CPU-backed) vs stock accelerator="cpu".

The same model, data and seed run alternately (cpu, hpu, cpu, hpu, ...) in one process, so drift on the machine
affects both alike. Throughput counts optimizer steps per second of the process's CPU time (all its threads) between
the first and the last training batch of each run (set-up and teardown excluded); the table reports the best of the
rounds and their ratio. Two models:

* the digits classifier (hidden 256, batch 32, logging its loss): a step this small is dominated by the emulated
  device's cost per operation, so the plugin's own cost cannot be measured apart from it (target 0.5, the tiny-step
  target of bench_hpu_device.py);
* the compute-bound MLP of bench_hpu_device.py (hidden 2048, batch 256, SGD with momentum): the operations are large,
  so what the Trainer, the HPU strategy, accelerator and precision plugin add per step shows (target 0.95).

Run it through `nox -s bench`; results go to benchmarks/results/hpu_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.testing import DigitsClassifier, DigitsDataModule

RESULTS = Path(__file__).parent / "results"
TARGET = 0.5
MLP_TARGET = 0.95
MLP_HIDDEN, MLP_BATCH = 2048, 256


class StepClock(L.Callback):
    """Records the process CPU time at every training batch end."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(self, *args: object) -> None:
        self.times.append(time.process_time())

    def steps_per_second(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def _trainer(accelerator: str, clock: StepClock, **kwargs: object) -> L.Trainer:
    return L.Trainer(
        accelerator=accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[clock],
        **kwargs,
    )


def run(accelerator: str, epochs: int) -> float:
    torch.manual_seed(0)
    clock = StepClock()
    trainer = _trainer(accelerator, clock, max_epochs=epochs)
    trainer.fit(DigitsClassifier(hidden=256), datamodule=DigitsDataModule(batch_size=32))
    return clock.steps_per_second()


class MLP(L.LightningModule):
    """bench_hpu_device.py's MLP as a LightningModule: 3 linear layers, cross-entropy, SGD with momentum."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def fit_steps_per_second(accelerator: str, hidden: int, batch: int, batches: int) -> float:
    """Optimizer steps per second of process CPU time of ``Trainer.fit`` on :class:`MLP`, one epoch of ``batches``."""
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(batches * batch, hidden, generator=generator),
        torch.randint(0, 10, (batches * batch,), generator=generator),
    )
    clock = StepClock()
    _trainer(accelerator, clock, max_epochs=1).fit(MLP(hidden), DataLoader(data, batch_size=batch))
    return clock.steps_per_second()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--mlp-batches", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)  # both runs on one thread: no contention between them and the machine's other core
    run("cpu", 1), run("hpu", 1)  # warm-up: imports, allocator, emulator start
    samples: dict[str, list[float]] = {"cpu": [], "hpu": []}
    mlp_samples: dict[str, list[float]] = {"cpu": [], "hpu": []}
    for _ in range(args.rounds):
        for accelerator in ("cpu", "hpu"):
            samples[accelerator].append(run(accelerator, args.epochs))
            mlp_samples[accelerator].append(fit_steps_per_second(accelerator, MLP_HIDDEN, MLP_BATCH, args.mlp_batches))
    cpu, hpu = max(samples["cpu"]), max(samples["hpu"])
    ratio = hpu / cpu
    mlp_cpu, mlp_hpu = max(mlp_samples["cpu"]), max(mlp_samples["hpu"])
    mlp_ratio = mlp_hpu / mlp_cpu
    RESULTS.mkdir(exist_ok=True)
    record = {
        "rounds": args.rounds,
        "epochs": args.epochs,
        "samples": samples,
        "cpu_steps_per_s": cpu,
        "hpu_steps_per_s": hpu,
        "ratio": ratio,
        "target": TARGET,
        "mlp": {
            "hidden": MLP_HIDDEN,
            "batch": MLP_BATCH,
            "batches": args.mlp_batches,
            "samples": mlp_samples,
            "cpu_steps_per_s": mlp_cpu,
            "hpu_steps_per_s": mlp_hpu,
            "ratio": mlp_ratio,
            "target": MLP_TARGET,
        },
        "method": "process CPU time, best of interleaved rounds",
        "torch_threads": 1,
    }
    (RESULTS / "hpu_overhead.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        "# Training throughput: emulated HPU (the torch device 'hpu', CPU-backed) vs stock CPU",
        "",
        f"{args.rounds} interleaved rounds, 1 torch thread; optimizer steps per second of the process's CPU time "
        "between the first and the last training batch, best of the rounds.",
        "",
        "| model | cpu (stock Lightning) steps/s | hpu (emulated) steps/s | ratio hpu / cpu | target |",
        "| --- | --- | --- | --- | --- |",
        f"| digits classifier (hidden 256, batch 32, {args.epochs} epochs) | {cpu:.1f} | {hpu:.1f} | **{ratio:.3f}** | "
        f">= {TARGET} ({'met' if ratio >= TARGET else 'NOT met'}) |",
        f"| compute-bound MLP (hidden {MLP_HIDDEN}, batch {MLP_BATCH}, {args.mlp_batches} batches) | {mlp_cpu:.2f} | "
        f"{mlp_hpu:.2f} | **{mlp_ratio:.3f}** | >= {MLP_TARGET} ({'met' if mlp_ratio >= MLP_TARGET else 'NOT met'}) |",
        "",
        "The emulated HPU runs every operation through its device's dispatch to the CPU's kernels (see "
        "hpu_native_device.md), which weighs most on the digits step; the compute-bound step shows what the plugin "
        "and the device add per step when the operations themselves take the time.",
    ]
    (RESULTS / "hpu_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
