"""Helpers shared by the Habana tests (a uniquely named module, so that test folders of other packages never clash)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent / "scripts"
PYTHON = sys.executable
# The session's setting, as the conftest left it before any test changed the environment: "hpu" by default, "0" when
# nox runs the suite on a Gaudi machine. Child processes get it passed on, never forced.
SESSION_EMULATE = os.environ.get("LIGHTNING_ACCEL_EMULATE", "hpu")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def script_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process: the session's HPUs (emulated or real), no inherited ranks."""
    from lightning_accel.habana._distributed_env import sdk_rendezvous_defaults

    # Nor the SDK's MASTER_ADDR=localhost / MASTER_PORT=12345, which loading it wrote into this process.
    dropped = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", *sdk_rendezvous_defaults()}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(LIGHTNING_ACCEL_EMULATE=SESSION_EMULATE, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def digits_loaders(batch_size: int = 64) -> tuple[Any, Any]:
    """Train and validation loaders over the bundled 8x8 digits (no download)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_accel.core.testing import load_digits

    features, labels = load_digits()
    x, y = features.float() / 16.0, labels.long()
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=generator)
    train, val = order[:1400], order[1400:]
    return (
        DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True, generator=generator),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=256),
    )


def digits_classifier(hidden: int = 64, lr: float = 1e-2) -> Any:
    """A small MLP LightningModule for the digits that logs ``val_acc``."""
    import torch
    from lightning.pytorch import LightningModule

    class DigitsClassifier(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
            self.eval_grad_modes: list[tuple[bool, bool]] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.eval_grad_modes.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
            self.log("val_acc", (self(x).argmax(dim=1) == y).float().mean(), sync_dist=True)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.validation_step(batch, batch_idx)

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.eval_grad_modes.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
            return self(batch[0]).argmax(dim=1)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=lr)

    return DigitsClassifier()


class TwoRankRuns:
    """Each distinct two-rank run of ``script`` once per test module: several tests compare against the same run.

    ``runs(*options, lazy="0")`` starts ``script --out <folder> *options`` (Lightning's launcher starts the second
    rank), and returns both ranks' saved records (``rank{0,1}.pt``) and the run's stderr.
    """

    def __init__(self, script: Path, root: Path) -> None:
        self.script = script
        self.root = root
        self.done: dict[tuple[str, ...], tuple[list[dict[str, Any]], str]] = {}

    def __call__(self, *options: str, lazy: str = "0") -> tuple[list[dict[str, Any]], str]:
        import torch

        key = (*options, f"lazy={lazy}")
        if key not in self.done:
            out = self.root / f"run{len(self.done)}"
            out.mkdir()
            env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PT_HPU_LAZY_MODE=lazy)
            command = [PYTHON, str(self.script), "--out", str(out), *options]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-4000:]
            ranks = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
            self.done[key] = (ranks, done.stderr)
        return self.done[key]


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two name -> tensor mappings hold the same names and bit-equal tensors."""
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
