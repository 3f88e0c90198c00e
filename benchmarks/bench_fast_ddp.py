"""Step time of fast_ddp (HPUFastDDPStrategy) against DDP (HPUParallelStrategy) on two emulated HPUs.

Two ranks (LIGHTNING_ACCEL_EMULATE=hpu, the emulated HCCL). The same model (16 linear layers of 256 x 256, 32
parameter tensors, SGD) trains ``--steps`` steps under each setup: DDP with its reducer, fast_ddp with a float32
buffer (the gradients DDP computes), fast_ddp with a bfloat16 buffer (optimum-habana's default). A step's time is
the wall time of a training batch (forward, backward, gradient all-reduce, optimizer step, a weight read back); the
figure is the median over the steps after the first ``WARMUP``, the slower rank's. These are the emulator's figures
(torch's CPU kernels and gloo behind the SDK's API), not Gaudi's: they show the cost of the strategy's own work per
step on this machine, not what HCCL gains from one fused collective. Results: benchmarks/results/fast_ddp.{md,json}.
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

RESULTS = Path(__file__).parent / "results"
SETUPS = ["ddp", "fast_ddp_float32", "fast_ddp_bfloat16"]
WARMUP = 5


def worker(out: str, steps: int) -> None:
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
            self.start = 0.0

        def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: object, i: int) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: object) -> None:
            next(pl_module.parameters()).view(-1)[0].item()  # waits for the step's work on the device
            self.times.append(time.perf_counter() - self.start)

    result, rank = {}, 0
    for setup in SETUPS:
        torch.manual_seed(0)
        devices = [torch.device("hpu")] * 2
        strategy = (
            HPUParallelStrategy(parallel_devices=devices)
            if setup == "ddp"
            else HPUFastDDPStrategy(parallel_devices=devices, buffer_dtype=getattr(torch, setup.rsplit("_", 1)[1]))
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
        result[setup] = clock.times
        rank = trainer.global_rank
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "LIGHTNING_ACCEL_EMULATE": "hpu", "OMP_NUM_THREADS": "1"}
        command = [sys.executable, __file__, "--worker", out, "--steps", str(args.steps)]
        subprocess.run(command, check=True, env=env)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
    rows = []
    for setup in SETUPS:
        step = max(statistics.median(rank[setup][WARMUP:]) for rank in ranks)
        rows.append({"setup": setup, "step_s": step})
    base = rows[0]["step_s"]
    mode = os.environ.get("PT_HPU_LAZY_MODE", "the SDK's default")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fast_ddp.json").write_text(
        json.dumps({"steps": args.steps, "warmup": WARMUP, "lazy_mode": mode, "rows": rows}, indent=2) + "\n"
    )
    lines = [
        "# fast_ddp against DDP on 2 emulated HPUs",
        "",
        f"16 x Linear(256, 256), batch 16 per rank, SGD, {args.steps} steps, PT_HPU_LAZY_MODE={mode}: the median "
        f"step after the first {WARMUP}, the slower rank's. Emulator figures, not Gaudi's. See "
        "benchmarks/bench_fast_ddp.py.",
        "",
        "| setup | step (ms) | vs ddp |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {r['setup']} | {1000 * r['step_s']:.2f} | {r['step_s'] / base:.2f} |" for r in rows]
    (RESULTS / "fast_ddp.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", metavar="DIR")
    parser.add_argument("--steps", type=int, default=40)
    arguments, _ = parser.parse_known_args()
    if arguments.worker:
        worker(arguments.worker, arguments.steps)
    else:
        main()
