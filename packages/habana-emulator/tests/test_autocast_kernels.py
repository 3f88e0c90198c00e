"""The SDK's autocast on the emulated HPU: C++ kernels on ``AutocastHPU``, and their rules on every kind of argument.

The per-operator dtypes of the default and custom lists, the lists read once at load and the plugin's files are
tested in packages/habana/tests/test_precision.py; here what those tests do not reach: tensor-list and optional
arguments, float64 and host tensors (never cast), gradients, and that the kernels are the device's C++ ones (as the
bridge's are), registered once. Loading the SDK cannot be undone, so these tests run in a child pytest process
(``_child_pytest``).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from _child_pytest import isolated_in_child

LIST_VARIABLES = ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", "PT_HPU_AUTOCAST_FP32_OPS_LIST")
pytestmark = [
    pytest.mark.emulator_only,  # reads the emulator's internals: not a test of real hardware
    pytest.mark.skipif(
        any(os.environ.get(variable) for variable in LIST_VARIABLES),
        reason="these tests need the SDK's default autocast lists; PT_HPU_AUTOCAST_*_OPS_LIST is set",
    ),
]


def _install() -> None:
    import lightning_accel.habana_emulator  # noqa: F401  (the SDK's load: the device, its autocast kernels)


isolated = isolated_in_child(__file__, "LIGHTNING_ACCEL_TEST_AUTOCAST_CHILD", timeout=600, before_each=_install)


@isolated
def test_the_kernels_are_the_devices_cpp_kernels_on_autocast_hpu() -> None:
    for name in ("aten::add.Tensor", "aten::linear", "aten::cat", "aten::exp", "aten::layer_norm"):
        kernel = [line for line in torch._C._dispatch_dump(name).splitlines() if line.startswith("AutocastHPU:")]
        assert len(kernel) == 1 and "emulated_hpu/csrc/amp/Autocast.cpp" in kernel[0], (name, kernel)
    # An operator of no list has no kernel: it falls through to autograd and the device.
    assert "AutocastHPU:" not in torch._C._dispatch_dump("aten::relu")


@isolated
def test_the_kernels_are_registered_once() -> None:
    from lightning_accel.habana_emulator import _native

    with pytest.raises(RuntimeError, match="registered once per process, when the SDK loads"):
        _native.device().register_autocast([("relu", _native.device().CastPolicy.fp32)])


@isolated
def test_tensor_lists_optionals_float64_and_host_tensors() -> None:
    x = torch.randn(4, 4, device="hpu")
    low = x.bfloat16()
    with torch.autocast("hpu", torch.bfloat16):
        # Promote over a tensor list: the widest of its tensors.
        assert torch.cat([x, low]).dtype == torch.float32
        assert torch.stack([low, low]).dtype == torch.bfloat16
        # Lower list with an absent optional (no bias), and with every input cast.
        assert F.linear(x, x).dtype == torch.bfloat16
        assert F.linear(x, x, torch.zeros(4, device="hpu")).dtype == torch.bfloat16
        # Lower list, first input only: the float32 weight is not cast.
        weight = torch.ones(4, device="hpu")
        assert F.layer_norm(x, (4,), weight).dtype == torch.bfloat16 and weight.dtype == torch.float32
        # float64 and tensors of other devices are never cast.
        assert torch.mm(x.double(), x.double()).dtype == torch.float64
        assert torch.mm(x.cpu(), x.cpu()).dtype == torch.float32
        # float32 list, on lower inputs; the promote set on float64 (ignored) and bfloat16.
        assert torch.exp(low).dtype == torch.float32
        assert torch.add(x.double(), low).dtype == torch.float64
        with torch.autocast("hpu", enabled=False):
            assert torch.mm(x, x).dtype == torch.float32
    # The inputs are untouched, and results equal a cast by hand.
    assert x.dtype == torch.float32
    with torch.autocast("hpu", torch.bfloat16):
        result = torch.mm(x, x)
    torch.testing.assert_close(result, torch.mm(low, low))


@isolated
def test_casts_are_recorded_by_autograd() -> None:
    weight = torch.randn(3, 4, device="hpu", requires_grad=True)
    x = torch.randn(2, 4, device="hpu")
    with torch.autocast("hpu", torch.bfloat16):
        out = F.linear(x, weight)
        loss = F.mse_loss(out, torch.zeros(2, 3, device="hpu"))  # float32 list
    assert (out.dtype, loss.dtype) == (torch.bfloat16, torch.float32)
    loss.backward()
    assert weight.grad is not None and weight.grad.dtype == torch.float32 and weight.grad.device.type == "hpu"
