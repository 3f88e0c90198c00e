"""Plugin overhead: training throughput under accelerator="hpu" (emulated, CPU-backed) vs stock accelerator="cpu".

The same model, data and seed run alternately (cpu, hpu, cpu, hpu, ...) in one process, so drift on the machine
affects both alike. Throughput counts optimizer steps per second between the first and the last training batch of
each run (set-up and teardown excluded); the table reports the medians and their ratio. Target: ratio >= 0.5, the
tiny-step target of the emulated device (bench_hpu_device.py): since the emulated HPU is the torch device "hpu", one
Python call per operation dominates a step this small, and the plugin's own cost cannot be measured apart from it.
Run it through `nox -s bench`; results go to benchmarks/results/hpu_overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")

import lightning as L
import torch

from lightning_accel.core.testing import DigitsClassifier, DigitsDataModule

RESULTS = Path(__file__).parent / "results"
TARGET = 0.5


class StepClock(L.Callback):
    """Records the time of every training batch end."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(self, *args: object) -> None:
        self.times.append(time.perf_counter())

    def steps_per_second(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def run(accelerator: str, epochs: int) -> float:
    torch.manual_seed(0)
    clock = StepClock()
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[clock],
    )
    trainer.fit(DigitsClassifier(hidden=256), datamodule=DigitsDataModule(batch_size=32))
    return clock.steps_per_second()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)  # both runs on one thread: no contention between them and the machine's other core
    run("cpu", 1), run("hpu", 1)  # warm-up: imports, allocator, emulator start
    samples: dict[str, list[float]] = {"cpu": [], "hpu": []}
    for _ in range(args.rounds):
        for accelerator in ("cpu", "hpu"):
            samples[accelerator].append(run(accelerator, args.epochs))
    cpu, hpu = statistics.median(samples["cpu"]), statistics.median(samples["hpu"])
    ratio = hpu / cpu
    RESULTS.mkdir(exist_ok=True)
    record = {
        "rounds": args.rounds,
        "epochs": args.epochs,
        "samples": samples,
        "cpu_steps_per_s": cpu,
        "hpu_steps_per_s": hpu,
        "ratio": ratio,
        "target": TARGET,
        "torch_threads": 1,
    }
    (RESULTS / "hpu_overhead.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        "# Training throughput: emulated HPU (the torch device 'hpu', CPU-backed) vs stock CPU",
        "",
        f"Digits MLP (hidden 256, batch 32), {args.epochs} epochs per run, {args.rounds} interleaved rounds, "
        "1 torch thread, medians of optimizer steps per second.",
        "",
        "| accelerator | steps/s (median) |",
        "| --- | --- |",
        f"| cpu (stock Lightning) | {cpu:.1f} |",
        f"| hpu (lightning-accel, emulated) | {hpu:.1f} |",
        "",
        f"Ratio hpu / cpu: **{ratio:.3f}** (target >= {TARGET}: {'met' if ratio >= TARGET else 'NOT met'}). The "
        "emulated HPU runs every operation through a Python tensor subclass on the CPU (see hpu_device.md), which "
        "dominates a step this small.",
    ]
    (RESULTS / "hpu_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
