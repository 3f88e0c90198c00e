"""Step time of fast_ddp (HPUFastDDPStrategy) against DDP (HPUParallelStrategy) on two emulated HPUs.

Two ranks (LIGHTNING_ACCEL_EMULATE=hpu, the emulated HCCL). The same model (16 linear layers of 256 x 256, 32
parameter tensors, SGD) trains ``--steps`` steps under each setup: DDP with its reducer, fast_ddp with a float32
buffer (the gradients DDP computes), fast_ddp with a bfloat16 buffer (optimum-habana's default), each fast_ddp with
its packing and unpacking as ordinary operations and, in lazy mode, as two replayed HPU graphs (``use_hpu_graphs``,
optimum-habana's default; graphs exist in lazy mode only). The setups run once in eager mode (the SDK's default) and
once in lazy mode (``PT_HPU_LAZY_MODE=1``), each mode in a process pair of its own; a row compares with DDP in the same
mode. A step's time is the wall time of a training batch (forward, backward, gradient all-reduce, optimizer step, a
weight read back); the figure is the median over the steps after the first ``WARMUP``, the slower rank's. These are
the emulator's figures (torch's CPU kernels and gloo behind the SDK's API), not Gaudi's: they show the cost of the
strategy's own work per step on this machine, not what HCCL gains from one fused collective, nor what a Gaudi saves
by launching one recipe instead of a lazy graph built op by op. Results: benchmarks/results/fast_ddp.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
# Setup name -> (buffer dtype, HPU graphs), None for DDP.
SETUPS: dict[str, tuple[str, bool] | None] = {
    "ddp": None,
    "fast_ddp_float32": ("float32", False),
    "fast_ddp_float32_graphs": ("float32", True),
    "fast_ddp_bfloat16": ("bfloat16", False),
    "fast_ddp_bfloat16_graphs": ("bfloat16", True),
}
MODES = {"eager": "0", "lazy": "1"}
WARMUP = 5


def setups(mode: str) -> list[str]:
    """The setups of ``mode``: no HPU graphs in eager mode, where the SDK cannot create them."""
    return [name for name, setup in SETUPS.items() if mode == "lazy" or setup is None or not setup[1]]


def worker(out: str, steps: int, mode: str) -> None:
    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_accel.habana import HPUFastDDPStrategy, HPUParallelStrategy

    class Deep(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                *[m for _ in range(16) for m in (torch.nn.Linear(256, 256), torch.nn.Tanh())]
            )

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    class Clock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.reductions: list[tuple[float, float]] = []  # (whole reduction, of which the collective)
            self.start = 0.0

        def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: object, i: int) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: object) -> None:
            next(pl_module.parameters()).view(-1)[0].item()  # waits for the step's work on the device
            self.times.append(time.perf_counter() - self.start)

        def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
            # fast_ddp's reduction alone (pack, all-reduce, unpack); DDP's overlaps the backward pass, so it has none.
            fusion = getattr(trainer.strategy, "fusion", None)
            if fusion is None:
                return
            reduce, collective = fusion.all_reduce, torch.distributed.all_reduce
            waited = [0.0]

            def timed_collective(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return collective(*args, **kwargs)
                finally:
                    waited[0] += time.perf_counter() - start

            def timed(*args: Any, **kwargs: Any) -> None:
                # The collective waits for the other rank, which a loaded machine delays at random: it is timed apart,
                # so that what remains is the strategy's own work (pack, unpack, checks, replays).
                waited[0] = 0.0
                torch.distributed.all_reduce = timed_collective
                start = time.perf_counter()
                try:
                    reduce(*args, **kwargs)
                    next(pl_module.parameters()).grad.view(-1)[0].item()
                finally:
                    torch.distributed.all_reduce = collective
                self.reductions.append((time.perf_counter() - start, waited[0]))

            fusion.all_reduce = timed

    result: dict[str, Any] = {}
    rank = 0
    for setup in setups(mode):
        torch.manual_seed(0)
        devices = [torch.device("hpu")] * 2
        fast = SETUPS[setup]
        strategy = (
            HPUParallelStrategy(parallel_devices=devices)
            if fast is None
            else HPUFastDDPStrategy(
                parallel_devices=devices, buffer_dtype=getattr(torch, fast[0]), use_hpu_graphs=fast[1]
            )
        )
        clock = Clock()
        trainer = Trainer(
            accelerator="hpu",
            devices=2,
            strategy=strategy,
            max_steps=steps,
            callbacks=[clock],
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
        )
        data = TensorDataset(torch.randn(32 * steps, 256))
        trainer.fit(Deep(), DataLoader(data, batch_size=16))
        # The graphs asked for must have been captured, or the row would time ordinary operations under their name.
        assert fast is None or strategy.hpu_graphs is fast[1], (setup, strategy.hpu_graphs)
        result[setup] = {"step": clock.times, "reduction": clock.reductions}
        rank = trainer.global_rank
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rows = []
    load = os.getloadavg()[0]  # the step times follow other work on the machine: recorded beside them
    for mode, lazy in MODES.items():
        with tempfile.TemporaryDirectory() as out:
            env = {**os.environ, "LIGHTNING_ACCEL_EMULATE": "hpu", "OMP_NUM_THREADS": "1", "PT_HPU_LAZY_MODE": lazy}
            command = [sys.executable, __file__, "--worker", out, "--steps", str(args.steps), "--mode", mode]
            subprocess.run(command, check=True, env=env)
            ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
        base = max(statistics.median(rank["ddp"]["step"][WARMUP:]) for rank in ranks)
        for setup in setups(mode):
            step = max(statistics.median(rank[setup]["step"][WARMUP:]) for rank in ranks)
            row = {
                "mode": mode,
                "setup": setup,
                "step_s": step,
                "vs_ddp": step / base,
                "reduction_s": None,
                "pack_unpack_s": None,
            }
            if SETUPS[setup] is not None:
                row["reduction_s"] = max(
                    statistics.median(r[0] for r in rank[setup]["reduction"][WARMUP:]) for rank in ranks
                )
                row["pack_unpack_s"] = max(
                    statistics.median(r[0] - r[1] for r in rank[setup]["reduction"][WARMUP:]) for rank in ranks
                )
            rows.append(row)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fast_ddp.json").write_text(
        json.dumps(
            {"steps": args.steps, "warmup": WARMUP, "load_average": load, "cpus": os.cpu_count(), "rows": rows},
            indent=2,
        )
        + "\n"
    )
    lines = [
        "# fast_ddp against DDP on 2 emulated HPUs",
        "",
        f"16 x Linear(256, 256), batch 16 per rank, SGD, {args.steps} steps, in eager mode (PT_HPU_LAZY_MODE=0, the "
        f"SDK's default) and lazy mode (PT_HPU_LAZY_MODE=1): the median step after the first {WARMUP}, the slower "
        "rank's; `_graphs` packs and unpacks with two replayed HPU graphs (lazy mode only). The reduction is "
        "fast_ddp's pack, all-reduce and unpack (DDP's overlaps its backward pass); pack + unpack is the reduction "
        "without the time spent in the all-reduce call, which waits for the other rank: the strategy's own work. "
        f"Emulator figures, not Gaudi's, on {os.cpu_count()} CPUs with a load average of {load:.1f} at the start "
        "(step times move with other work on the machine; pack + unpack much less). See benchmarks/bench_fast_ddp.py.",
        "",
        "| mode | setup | step (ms) | vs ddp (same mode) | reduction (ms) | pack + unpack (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        figures = ["-" if r[k] is None else f"{1000 * r[k]:.2f}" for k in ("reduction_s", "pack_unpack_s")]
        lines.append(
            f"| {r['mode']} | {r['setup']} | {1000 * r['step_s']:.2f} | {r['vs_ddp']:.2f} | {' | '.join(figures)} |"
        )
    (RESULTS / "fast_ddp.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", metavar="DIR")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--mode", choices=list(MODES), default="eager")
    arguments, _ = parser.parse_known_args()
    if arguments.worker:
        worker(arguments.worker, arguments.steps, arguments.mode)
    else:
        main()
