"""poptorch.DataLoader on the emulator: samples per second through an epoch, and the cost of a loader's whole life.

Rows: torch's DataLoader, poptorch.DataLoader in Sync, Async and AsyncRebatched mode, with 0 and 2 worker processes,
over the same map-style dataset (4096 samples of 64 floats, combined batch 64: batch 16, device_iterations 4). Two
numbers per row, best of ``--repeats`` rounds (round-robin, so that a slow moment on a shared machine costs a round,
not a row):

- ``samples/s``: an epoch of a loader that exists already (its workers, if persistent, started);
- ``life (s)``: make the loader, run one epoch, drop it and collect garbage, as a test or a notebook cell does. Until
  the accessor held its loader weakly (issue 47), an Async loader's life ended in the garbage collector, where torch
  waits 5 s for each worker.

Results: benchmarks/results/ipu_dataloader.json and .md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "ipu")

import poptorch
import torch

RESULTS = Path(__file__).parent / "results"
SAMPLES = 4096
FEATURES = 64
BATCH = 16
DEVICE_ITERATIONS = 4


def dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(SAMPLES, FEATURES, generator=generator), torch.arange(SAMPLES))


def make(kind: str, workers: int) -> Callable[[], Any]:
    """A function that makes the loader of row ``kind`` with ``workers`` worker processes."""
    if kind == "torch":
        combined = BATCH * DEVICE_ITERATIONS
        return lambda: torch.utils.data.DataLoader(
            dataset(), batch_size=combined, drop_last=True, num_workers=workers, persistent_workers=workers > 0
        )
    mode = getattr(poptorch.DataLoaderMode, kind)
    options = poptorch.Options().deviceIterations(DEVICE_ITERATIONS)
    return lambda: poptorch.DataLoader(options, dataset(), batch_size=BATCH, num_workers=workers, mode=mode)


def epoch(loader: Any) -> int:
    samples = 0
    for batch in loader:
        samples += len(batch[0])
    return samples


def measure(factory: Callable[[], Any]) -> tuple[float, float]:
    """Samples per second of an epoch of a started loader, and the seconds of a loader's whole life."""
    loader = factory()
    epoch(loader)  # starts persistent workers, warms caches
    start = time.perf_counter()
    samples = epoch(loader)
    rate = samples / (time.perf_counter() - start)
    del loader
    gc.collect()
    start = time.perf_counter()
    loader = factory()
    epoch(loader)
    del loader
    gc.collect()
    return rate, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every row; each keeps its best")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = [
        {"loader": kind, "workers": workers}
        for kind in ("torch", "Sync", "Async", "AsyncRebatched")
        for workers in args.workers
    ]
    for row in rows:
        row["samples_per_s"], row["life_s"] = 0.0, float("inf")
    for _ in range(args.repeats):
        for row in rows:
            rate, life = measure(make(row["loader"], row["workers"]))
            row["samples_per_s"], row["life_s"] = max(row["samples_per_s"], rate), min(row["life_s"], life)
    meta = {
        "samples": SAMPLES,
        "features": FEATURES,
        "batch_size": BATCH,
        "device_iterations": DEVICE_ITERATIONS,
        "repeats": args.repeats,
        "torch_threads": 1,
        "clock": "wall",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ipu_dataloader.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# poptorch.DataLoader on the emulator",
        "",
        f"{SAMPLES} samples of {FEATURES} floats, batch {BATCH} x device_iterations {DEVICE_ITERATIONS} (torch's "
        f"loader: batch {BATCH * DEVICE_ITERATIONS}), wall clock, 1 torch thread, best of {args.repeats} round(s). "
        "samples/s: one epoch of a started loader; life: make it, one epoch, drop it, collect garbage.",
        "",
        "| loader | workers | samples/s | life (s) |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        name = "torch DataLoader" if row["loader"] == "torch" else f"poptorch.DataLoader, {row['loader']}"
        lines.append(f"| {name} | {row['workers']} | {row['samples_per_s']:.0f} | {row['life_s']:.2f} |")
    (RESULTS / "ipu_dataloader.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
