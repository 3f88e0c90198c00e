"""torch.compile backends: listed by torch after `import torch`, compiled training matches eager, refusals."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, script_env
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.habana import hpu_backend
from lightning_accel.habana.sdk import htcore


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-c", code], env=script_env(**env), capture_output=True, text=True, timeout=300)


def test_torch_lists_the_backends_right_after_import_torch_and_loads_nothing() -> None:
    # In eager mode the SDK itself loads with torch (PT_HPU_AUTOLOAD, as the real SDK does); with that off, torch still
    # calls this package's small autoload hook, but listing the compile backends must load neither SDK nor emulator.
    done = _run(
        PT_HPU_AUTOLOAD="0",
        code=(
            "import sys, torch\n"
            "names = {'hpu_backend', 'aot_hpu_training_backend', 'aot_hpu_inference_backend'}\n"
            "missing = names - set(torch._dynamo.list_backends(exclude_tags=()))\n"
            "assert not missing, f'not listed: {missing}'\n"
            "sdk = ('habana_frameworks', 'lightning_accel.habana_emulator')\n"
            "loaded = [m for m in sys.modules if m.startswith(sdk)]\n"
            "assert not loaded, f'listing the backends imported {loaded}'\n"
        ),
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_model_compiled_by_name_before_any_trainer_trains_like_eager() -> None:
    done = _run(
        "import torch\n"
        "def run(compile):\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))\n"
        "    step = torch.compile(net, backend='hpu_backend') if compile else net\n"
        "    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1)); y = x.sum(1, keepdim=True)\n"
        "    losses = []\n"
        "    for _ in range(20):\n"
        "        opt.zero_grad(); loss = torch.nn.functional.mse_loss(step(x), y); loss.backward(); opt.step()\n"
        "        losses.append(loss.item())\n"
        "    return losses\n"
        "eager, compiled = run(False), run(True)\n"
        "assert compiled[-1] < 0.5 * compiled[0], compiled\n"
        "torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6)\n"
        "from torch._dynamo.backends.registry import lookup_backend\n"
        "print(lookup_backend('hpu_backend').__module__)\n"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # After first use the name belongs to the SDK's own function (here: the emulator's), not to our delegate.
    assert done.stdout.strip().endswith("dynamo.compile_backend.backends")


def test_compiling_needs_the_sdk_or_the_emulator() -> None:
    done = _run(
        "import torch\nc = torch.compile(torch.nn.Linear(2, 2), backend='hpu_backend')\nc(torch.ones(1, 2))\n",
        LIGHTNING_ACCEL_EMULATE="0",
    )
    assert done.returncode != 0
    assert "LIGHTNING_ACCEL_EMULATE=hpu" in done.stderr and "habana_frameworks" in done.stderr


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


def test_compiled_lightning_module_trains_to_the_eager_loss(eager_mode: None) -> None:
    eager = Regressor()
    _fit(eager)
    compiled_module = Regressor()
    _fit(torch.compile(compiled_module, backend=hpu_backend))
    assert compiled_module._compiler_ctx is not None  # Lightning ran the compiled forward
    assert len(compiled_module.losses) == len(eager.losses) == 12
    assert compiled_module.losses == pytest.approx(eager.losses, rel=1e-4, abs=1e-6)
    assert eager.losses[-1] < eager.losses[0]


def test_the_earlier_sdk_names_are_aliases_of_hpu_backend_with_a_note(eager_mode: None) -> None:
    net = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    for name in ("aot_hpu_inference_backend", "aot_hpu_training_backend"):
        torch._dynamo.reset()
        compiled = torch.compile(net, backend=name)
        with pytest.warns(FutureWarning, match=rf"backend='{name}' is the name earlier Gaudi SDKs used"):
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), net(x))


def test_lazy_mode_refuses_compilation_with_the_fix(lazy_mode: None) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(torch.nn.Linear(4, 2), backend=hpu_backend)
    with pytest.raises(Exception, match=r"needs eager mode, but PT_HPU_LAZY_MODE=1"):
        compiled(torch.randn(3, 4))


def test_hpu_graphs_refuse_a_compiled_model(lazy_mode: None) -> None:
    compiled = torch.compile(torch.nn.Linear(4, 2), backend="hpu_backend")
    with pytest.raises(RuntimeError, match=r"cannot be combined with torch\.compile"):
        htcore.hpu.wrap_in_hpu_graph(compiled)
