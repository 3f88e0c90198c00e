"""torch.compile backends: registration on first SDK use, compiled training matches eager, refusals."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, script_env
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import compile_backends, hpu_backend
from lightning_accel.habana.sdk import htcore


def test_backends_register_on_first_sdk_use_not_on_package_import() -> None:
    code = (
        "import torch._dynamo as d, lightning_accel.habana\n"
        "names = {'hpu_backend', 'aot_hpu_training_backend', 'aot_hpu_inference_backend'}\n"
        "assert not names & set(d.list_backends(exclude_tags=())), 'registered at import'\n"
        "from lightning_accel.habana.sdk import htcore\n"
        "htcore.mark_step()\n"
        "assert names <= set(d.list_backends(exclude_tags=())), 'not registered on SDK use'\n"
    )
    done = subprocess.run([PYTHON, "-c", code], env=script_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


class Regressor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(model: Any) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(128, 8, generator=generator)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).sin()), batch_size=32)
    Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(model, data)


def test_compiled_lightning_module_trains_to_the_eager_loss() -> None:
    eager = Regressor()
    _fit(eager)
    compiled_module = Regressor()
    _fit(torch.compile(compiled_module, backend=hpu_backend))
    assert compiled_module._compiler_ctx is not None  # Lightning ran the compiled forward
    assert len(compiled_module.losses) == len(eager.losses) == 12
    assert compiled_module.losses == pytest.approx(eager.losses, rel=1e-4, abs=1e-6)
    assert eager.losses[-1] < eager.losses[0]


def test_inference_backend_compiles_eval_and_refuses_training() -> None:
    compile_backends.register_compile_backends()
    net = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    compiled = torch.compile(net, backend="aot_hpu_inference_backend")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
    with pytest.raises(RuntimeError, match=r"cannot be combined with torch\.compile"):
        htcore.hpu.wrap_in_hpu_graph(compiled)
    training = torch.compile(torch.nn.Linear(4, 2), backend="aot_hpu_inference_backend")
    with pytest.raises(Exception, match="compiles inference graphs"):
        training(x)
