"""Per-rank memory of parameters, gradients and optimizer state: plain DDP and DeepSpeed ZeRO stages 0 to 3.

Two emulated HPUs (LIGHTNING_ACCEL_EMULATE=hpu, DeepSpeed on its CPU accelerator over the emulated HCCL). The
same model (256-1024-256 linear layers, AdamW) trains two steps under each strategy; just before the optimizer step
each rank counts the bytes it holds (`lightning_accel.deepspeed_hpu.zero_memory` for DeepSpeed, the module's and
optimizer's tensors for DDP). These are the states' own bytes, not the allocator's. Target: stage 3 <= 0.55 x
stage 0. Results: benchmarks/results/zero_memory.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SETUPS = ["ddp", "stage_0", "stage_1", "stage_2", "stage_3"]
STATES = ("parameters", "gradients", "optimizer_state")


def worker(out: str) -> None:
    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy, zero_memory

    class Wide(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256))

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters())

    def nbytes(tensors: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    class Measure(Callback):
        memory: dict[str, int]

        def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: object) -> None:
            engine = getattr(trainer.strategy, "deepspeed_engine", None)
            if engine is not None:
                self.memory = {name: getattr(zero_memory(engine), name) for name in STATES}
                return
            params = list(pl_module.parameters())
            state = [v for s in trainer.optimizers[0].state.values() for v in s.values() if torch.is_tensor(v)]
            grads = [p.grad for p in params if p.grad is not None]
            self.memory = {"parameters": nbytes(params), "gradients": nbytes(grads), "optimizer_state": nbytes(state)}

    result, rank = {}, 0
    for setup in SETUPS:
        strategy = "hpu_parallel" if setup == "ddp" else HPUDeepSpeedStrategy(stage=int(setup[-1]))
        measure = Measure()
        trainer = Trainer(
            accelerator="hpu",
            devices=2,
            strategy=strategy,
            max_steps=2,
            callbacks=[measure],
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
        )
        trainer.fit(Wide(), DataLoader(TensorDataset(torch.randn(16, 256)), batch_size=4))
        result[setup] = measure.memory
        rank = trainer.global_rank
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "LIGHTNING_ACCEL_EMULATE": "hpu", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, __file__, "--worker", out], check=True, env=env)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
    rows = []
    stage_0_total = sum(ranks[0]["stage_0"].values())
    for setup in SETUPS:
        per_rank = [sum(rank[setup].values()) for rank in ranks]
        rows.append(
            {
                "setup": setup,
                **{s: ranks[0][setup][s] for s in STATES},
                "total_rank0": per_rank[0],
                "total_rank1": per_rank[1],
                "vs_stage_0": per_rank[0] / stage_0_total,
            }
        )
    ratio = rows[-1]["vs_stage_0"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "zero_memory.json").write_text(json.dumps({"rows": rows, "target": 0.55}, indent=2) + "\n")
    mib = 1024 * 1024
    lines = [
        "# Per-rank memory: plain DDP and ZeRO stages on 2 emulated HPUs",
        "",
        "Bytes each rank holds just before the optimizer step (model 256-1024-256, AdamW, fp32), rank 0 shown.",
        "",
        "| setup | parameters (MiB) | gradients (MiB) | optimizer state (MiB) | total (MiB) | vs stage 0 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        states = " | ".join(f"{row[s] / mib:.2f}" for s in STATES)
        lines.append(f"| {row['setup']} | {states} | {row['total_rank0'] / mib:.2f} | {row['vs_stage_0']:.2f} |")
    lines += ["", f"Stage 3 / stage 0: **{ratio:.2f}** (target <= 0.55: {'met' if ratio <= 0.55 else 'NOT met'})."]
    (RESULTS / "zero_memory.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        bottom = [0.0] * len(rows)
        for state in STATES:
            values = [row[state] / mib for row in rows]
            ax.bar([row["setup"] for row in rows], values, bottom=bottom, label=state)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_ylabel("MiB per rank")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "zero_memory.png", dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot written")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", metavar="DIR")
    arguments = parser.parse_args()
    worker(arguments.worker) if arguments.worker else main()
