"""Issue 47, item 2: ``poptorch.CPU`` runs a host function inside an inference graph, written from poptorch 3.4's
``tests/cpu_op_test.py`` and ``python/ops.py:896-1012``.

The function runs on the host every time the compiled graph runs (so its outputs follow each call's inputs), on
host tensors, and once more while the model is traced, on zeros.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import torch


def test_a_host_op_follows_every_call_s_inputs(poptorch: ModuleType) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cpu = poptorch.CPU(self.foo, "MyCPUOp")

        def foo(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x * y

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.cpu(x, y) * 3.0

    executor = poptorch.inferenceModel(Model())
    x = torch.randn(5, 2, 3, 5)
    torch.testing.assert_close(executor(x, torch.tensor([2.0])), x * 6.0)
    torch.testing.assert_close(executor(x, torch.tensor([4.0])), x * 12.0)


def test_a_host_op_with_several_outputs_and_a_reduction(poptorch: ModuleType) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cpu = poptorch.CPU(lambda x, y: (x * y, x + y, torch.mean(x)), "MyCPUOp")

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
            w, z, m = self.cpu(x, y)
            return w * 3.0, z, m

    x, y = torch.randn(5, 2, 3, 5), torch.tensor([4.0])
    w, z, m = poptorch.inferenceModel(Model())(x, y)
    torch.testing.assert_close(w, x * 12.0)
    torch.testing.assert_close(z, x + y)
    torch.testing.assert_close(m, torch.mean(x))


def test_a_host_module_runs_on_host_tensors_each_call(poptorch: ModuleType) -> None:
    calls: list[str] = []
    linear = torch.nn.Linear(20, 30)

    def on_host(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.device.type)
        return linear(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cpu = poptorch.CPU(on_host, "MatMulOnCPU")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.cpu(self.cpu(x)[:, :20])

    executor = poptorch.inferenceModel(Model())
    x = torch.randn(4, 20)
    with torch.no_grad():
        expected = linear(linear(x)[:, :20])
    torch.testing.assert_close(executor(x), expected)
    torch.testing.assert_close(executor(x), expected)
    # Twice while traced (on zeros), then twice per call.
    assert calls == ["cpu"] * 6
    assert not poptorch.CPU(linear, "Linear")._layer_to_call.weight.requires_grad


def test_a_poptorch_op_inside_a_host_op_is_not_a_loss_of_the_graph(poptorch: ModuleType) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cpu = poptorch.CPU(self.foo, "MyCPUOp")

        def foo(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss(x, reduction="sum")

        def forward(self, x: torch.Tensor) -> Any:
            return self.cpu(x), self.foo(x)

    executor = poptorch.inferenceModel(Model(), poptorch.Options().deviceIterations(2))
    on_host, on_ipu = executor(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert on_host.tolist() == [3.0, 7.0]
    assert on_ipu.tolist() == [3.0, 7.0]


def test_a_host_op_in_a_training_model_is_refused(poptorch: ModuleType) -> None:
    # "CPU ops are only supported in inference graphs" (poptorch python/ops.py:899): no gradient crosses the host.
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.cpu = poptorch.CPU(lambda x: x * 2.0, "Double")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return poptorch.identity_loss(self.cpu(self.lin(x)).sum(), reduction="sum")

    model = Model()
    executor = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(poptorch.Error, match=r"poptorch.CPU\('Double'\) is only supported in inference graphs"):
        executor(torch.ones(2, 3))
