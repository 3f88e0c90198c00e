"""The pre-flight report's device memory per rank, against the emulator's measured peak in real multi-rank runs.

The report predicts from one emulated HPU's step; this module also runs, as a script, the same model under DDP and
under FSDP2 (``fully_shard`` per block, then the whole body) on two emulated HPUs in real processes, and each rank
reads the peak of its second step (``torch.hpu.max_memory_allocated``, the emulator's exact accounting).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

WIDTH, BLOCKS, VOCAB, LENGTH, BATCH = 256, 4, 1024, 32, 4
TOLERANCE = 0.10


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.down = torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Body(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class TinyLM(LightningModule):
    """A small language model: an embedding, four MLP blocks in a ModuleList, an output layer; AdamW."""

    def __init__(self, shard: bool = False) -> None:
        super().__init__()
        self.shard = shard
        torch.manual_seed(0)
        self.body = Body()

    def configure_model(self) -> None:
        if self.shard and self.device_mesh is not None:
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            for block in self.body.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(self.body, mesh=mesh)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens = batch[0]
        return torch.nn.functional.cross_entropy(self.body(tokens).flatten(0, 1), tokens.flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader[Any]:
        tokens = torch.randint(0, VOCAB, (8 * BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(tokens), batch_size=BATCH)


class _Peak(Callback):
    """The device memory's peak over the second training step."""

    peak = 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        torch.hpu.synchronize()
        torch.hpu.reset_peak_memory_stats()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        torch.hpu.synchronize()
        if trainer.global_step == 2:
            self.peak = torch.hpu.max_memory_allocated()


def _measure(setup: str, out: str) -> None:
    from lightning_accel.habana import HPUModelParallelStrategy

    strategy: Any = "hpu_parallel"
    if setup == "fsdp":
        strategy = HPUModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    peak = _Peak()
    trainer = Trainer(
        accelerator="hpu",
        devices=2,
        strategy=strategy,
        max_steps=2,
        callbacks=[peak],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyLM(shard=setup == "fsdp"))
    Path(out, f"rank{trainer.global_rank}.json").write_text(json.dumps({"peak": peak.peak}))


def _measured_peaks(setup: str, tmp_path: Path) -> list[int]:
    from _habana_helpers import script_env

    out = tmp_path / setup
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, setup, str(out)],
        cwd=Path(__file__).parent,
        env=script_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text())["peak"] for rank in (0, 1)]


if __name__ == "__main__":
    _measure(sys.argv[1], sys.argv[2])
    sys.exit(0)


import pytest  # noqa: E402  # not needed by the script's ranks

from lightning_accel.habana.preflight import DEVICES, MemoryProfile, Report, largest_batch, predict, preflight  # noqa: E402


@pytest.fixture(scope="module")
def report() -> Report:
    return preflight(TinyLM(), modes=("lazy",), steps=2, strategies=("ddp", "fsdp", "zero3"), world_size=2, tp_size=1)


@pytest.mark.parametrize("setup", ["ddp", "fsdp"])
def test_prediction_within_10_percent_of_the_measured_peak_per_rank(report: Report, setup: str, tmp_path: Path) -> None:
    (finding,) = [f for f in report.of_kind("memory", "lazy") if f.details["strategy"] == setup]
    assert finding.details["world_size"] == 2 and finding.details["batch_size"] == BATCH
    predicted = finding.details["bytes_per_rank"]
    for rank, measured in enumerate(_measured_peaks(setup, tmp_path)):
        assert abs(predicted - measured) <= TOLERANCE * measured, (setup, rank, predicted, measured)


def test_a_batch_that_does_not_fit_a_gaudi2_under_ddp_but_fits_under_zero3(report: Report) -> None:
    profile = MemoryProfile.from_dict(report.modes["lazy"]["memory"])
    gaudi2 = DEVICES["Gaudi2"]
    # 1 MiB gradient buckets: DeepSpeed's default of 2e8 elements (800 MB) is more than this small model's states.
    zero = {"zero_optimization": {"stage": 3, "reduce_bucket_size": 2**18}}
    batch = largest_batch(profile, "ddp", 8, gaudi2) + 1
    assert predict(profile, "ddp", 8, batch) > gaudi2 >= predict(profile, "zero3", 8, batch, deepspeed_config=zero)
    again = Report.from_dict(report.as_dict())
    again.findings = []
    from lightning_accel.habana.preflight.memory import add_memory_findings

    add_memory_findings(again, ("ddp", "zero3"), world_size=8, batch_size=batch, deepspeed_config=zero)
    ddp, zero3 = again.of_kind("memory")
    assert (
        ddp.what.startswith("DDP on 8 HPUs: ") and f"per rank at micro-batch {batch}: does NOT fit Gaudi2" in ddp.what
    )
    assert "gradient accumulation" in ddp.fix
    assert zero3.what.startswith("ZeRO-3 on 8 HPUs: ") and f"micro-batch {batch}: fits Gaudi2 (96.00 GiB)" in zero3.what
    assert zero3.details["largest_batch"]["Gaudi2"] >= batch > ddp.details["largest_batch"]["Gaudi2"]


def test_memory_options_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match=r"strategies=\['zero4'\]: accepted strategies are ddp, fsdp, fsdp2_tp"):
        preflight(TinyLM(), strategies=("zero4",))
    with pytest.raises(ValueError, match=r"tp_size=3: must be a positive int dividing world_size=8."):
        preflight(TinyLM(), tp_size=3)
    with pytest.raises(ValueError, match=r"batch_size=0: must be a positive int"):
        preflight(TinyLM(), batch_size=0)
