"""The emulated HPU as the torch device ``"hpu"``: the C++ device (``lightning_accel.emulated_hpu``) under the SDK.

Loading the emulated SDK loads the device and registers ``torch.hpu``, which cannot be undone in a process, so these
tests run in one child pytest process of their own (``_child_pytest``), away from what the rest of the suite did to its
process:
each test here reports the outcome of the same test in that child, with its failure text.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _child_pytest import isolated_in_child
from _emulator_helpers import free_port, script_env

# Reads the emulator's internals (or stands in for the SDK): not a test of real hardware.
pytestmark = pytest.mark.emulator_only


def _install() -> None:
    import lightning_accel.habana_emulator  # noqa: F401  (the SDK's load: the device and torch.hpu)


CHILD_VAR = "LIGHTNING_ACCEL_TEST_HPU_DEVICE_CHILD"
MIB = 1024 * 1024
isolated = isolated_in_child(__file__, CHILD_VAR, timeout=600, before_each=_install)


def _mlp(seed: int = 0, hidden: int = 32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, 3),
    )


# --- factories and moves ---------------------------------------------------------------------------------------------


@isolated
def test_factories_make_hpu_tensors() -> None:
    torch.manual_seed(0)
    made = {
        "randn": torch.randn(4, 3, device="hpu"),
        "rand": torch.rand(5, device="hpu"),
        "zeros": torch.zeros(2, 3, device="hpu"),
        "ones": torch.ones(3, device="hpu", dtype=torch.float64),
        "full": torch.full((2, 2), 7.5, device="hpu"),
        "arange": torch.arange(6, device="hpu"),
        "arange_step": torch.arange(1.0, 2.0, 0.25, device="hpu"),
        "empty": torch.empty(3, 4, device="hpu"),
        "tensor": torch.tensor([[1, 2], [3, 4]], device="hpu"),
        "eye": torch.eye(3, device="hpu"),
        "linspace": torch.linspace(0, 1, 5, device="hpu"),
        "randint": torch.randint(0, 10, (4,), device="hpu"),
        "zeros_like": torch.zeros_like(torch.ones(2, device="hpu")),
    }
    for name, tensor in made.items():
        assert tensor.device == torch.device("hpu", 0), name
    assert made["ones"].dtype == torch.float64
    assert made["zeros"].cpu().eq(0).all()
    assert made["full"].cpu().eq(7.5).all()
    assert made["arange"].cpu().tolist() == [0, 1, 2, 3, 4, 5]
    assert made["arange_step"].cpu().tolist() == [1.0, 1.25, 1.5, 1.75]
    assert made["tensor"].cpu().tolist() == [[1, 2], [3, 4]]
    assert torch.equal(made["eye"].cpu(), torch.eye(3))
    assert made["empty"].shape == (3, 4)


@isolated
def test_to_hpu_and_back() -> None:
    host = torch.randn(3, 4)
    on_hpu = host.to("hpu")
    assert on_hpu.device.type == "hpu" and on_hpu.device.index == 0
    assert torch.equal(on_hpu.cpu(), host)
    assert torch.equal(on_hpu.to("cpu"), host)
    assert on_hpu.cpu().device == torch.device("cpu")
    assert torch.equal(host.to(torch.device("hpu", 0)).cpu(), host)
    half = on_hpu.to(torch.float16)
    assert half.device.type == "hpu" and half.dtype == torch.float16
    assert on_hpu.to("hpu") is on_hpu  # already there: no copy, as for any device
    # The copy is a copy: changing it leaves the host tensor alone.
    on_hpu.add_(1)
    assert torch.allclose(on_hpu.cpu(), host + 1)


@isolated
def test_module_to_hpu_and_back() -> None:
    model = _mlp()
    model.register_buffer("scale", torch.tensor([2.0, 3.0]))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    params_before = list(model.parameters())
    model.to("hpu")
    for name, tensor in model.state_dict().items():
        assert tensor.device == torch.device("hpu", 0), name
        assert torch.equal(tensor.cpu(), reference[name]), name
    for param in model.parameters():
        assert isinstance(param, torch.nn.Parameter) and param.requires_grad
    # The parameter objects are kept (their contents swapped), so an optimizer made before .to() still holds them.
    assert all(a is b for a, b in zip(params_before, model.parameters(), strict=True))
    model.half()
    assert all(p.dtype == torch.float16 and p.device.type == "hpu" for p in model.parameters())
    model.float().cpu()
    for name, tensor in model.state_dict().items():
        assert tensor.device == torch.device("cpu"), name
        assert torch.allclose(tensor, reference[name], atol=1e-3), name


@isolated
def test_device_indices() -> None:
    assert torch.device("hpu").type == "hpu"
    assert torch.zeros(1, device="hpu").device == torch.device("hpu", 0)
    assert torch.zeros(1, device=torch.device("hpu")).device.index == 0
    # One device per process, as the SDK's guard (HPUGuardImpl.h) checks: hpu:1 is refused with its text.
    with pytest.raises(RuntimeError, match=r"habana active device: 1 != 0"):
        torch.ones(2, device="hpu:1")
    with pytest.raises(RuntimeError, match=r"habana active device: 2 != 0"):
        torch.ones(2).to("hpu:2")


@isolated
def test_hpu_tensors_are_plain_tensors_on_the_hpu_dispatch_key() -> None:
    tensor = torch.ones(2, 3, device="hpu")
    assert type(tensor) is torch.Tensor
    keys = str(torch._C._dispatch_keys(tensor))
    assert "HPU" in keys and "AutogradHPU" in keys and "AutocastHPU" in keys and "PrivateUse1" not in keys
    assert "Python" not in keys.replace("PythonTLSSnapshot", "")
    layer = torch.nn.Linear(3, 2).to("hpu")
    assert type(layer.weight) is torch.nn.Parameter and layer.weight.device == torch.device("hpu", 0)
    assert type(torch.nn.Parameter(tensor)) is torch.nn.Parameter


@isolated
def test_torch_hpu_module() -> None:
    import lightning_accel.habana_emulator
    from lightning_accel.habana_emulator import hpu as sdk_hpu

    # As on Gaudi (core/__init__.py:46), torch.hpu is the SDK's hpu module itself.
    assert torch.hpu is sdk_hpu is lightning_accel.habana_emulator.hpu
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"  # PrivateUse1 stays free
    assert torch.hpu.is_available()
    assert torch.hpu.device_count() == sdk_hpu.device_count()
    assert torch.hpu.current_device() == 0
    # Everything else is the SDK module's, as torch.hpu is habana_frameworks.torch.hpu on Gaudi.
    assert torch.hpu.get_device_name() == sdk_hpu.get_device_name()
    assert set(torch.hpu.memory_stats()) == set(sdk_hpu.memory_stats())


# --- printing and reading --------------------------------------------------------------------------------------------


@isolated
def test_printing_and_reading_values() -> None:
    tensor = torch.tensor([[1.5, 2.0], [3.0, 4.25]], device="hpu")
    assert repr(tensor) == "tensor([[1.5000, 2.0000],\n        [3.0000, 4.2500]], device='hpu:0')"
    assert str(torch.tensor(3, device="hpu")) == "tensor(3, device='hpu:0')"
    param = torch.nn.Parameter(torch.ones(2, device="hpu"))
    assert repr(param) == "Parameter containing:\ntensor([1., 1.], device='hpu:0', requires_grad=True)"
    assert tensor.sum().item() == 10.75
    assert tensor.tolist() == [[1.5, 2.0], [3.0, 4.25]]
    assert f"{tensor[0, 0]:.2f}" == "1.50"
    assert float(tensor[1, 1]) == 4.25 and int(tensor[1, 0]) == 3
    with pytest.raises(TypeError, match="can't convert hpu:0 device type tensor to numpy"):
        tensor.numpy()


# --- autograd and optimizers -----------------------------------------------------------------------------------------


@isolated
def test_backward_through_an_mlp() -> None:
    cpu_model, hpu_model = _mlp(), _mlp().to("hpu")
    x = torch.randn(16, 8)
    target = torch.randint(0, 3, (16,))
    torch.nn.functional.cross_entropy(cpu_model(x), target).backward()
    loss = torch.nn.functional.cross_entropy(hpu_model(x.to("hpu")), target.to("hpu"))
    assert loss.device.type == "hpu" and loss.grad_fn is not None
    loss.backward()
    for (name, cpu_param), hpu_param in zip(cpu_model.named_parameters(), hpu_model.parameters(), strict=True):
        assert hpu_param.grad is not None and hpu_param.grad.device == torch.device("hpu", 0), name
        assert torch.allclose(hpu_param.grad.cpu(), cpu_param.grad, atol=1e-6), name
    # Gradients accumulate on the device, too.
    torch.nn.functional.cross_entropy(hpu_model(x.to("hpu")), target.to("hpu")).backward()
    first = next(hpu_model.parameters())
    assert torch.allclose(first.grad.cpu(), 2 * next(cpu_model.parameters()).grad, atol=1e-6)


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd-for-loop": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
    "adam-for-loop": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False, fused=False),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True, fused=False),
    "adamw-for-loop": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=False, fused=False),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=True, fused=False),
    "adamw-amsgrad-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, foreach=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@isolated
def test_optimizer_steps_match_the_cpu(name: str) -> None:
    make = OPTIMIZERS[name]
    torch.manual_seed(1)
    batches = [(torch.randn(16, 8), torch.randint(0, 3, (16,))) for _ in range(6)]
    weights = {}
    for device in ("cpu", "hpu"):
        model = _mlp().to(device)
        optimizer = make(model.parameters())
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
        weights[device] = [p.detach().cpu() for p in model.parameters()]
        if device == "hpu":
            state = optimizer.state[next(model.parameters())]
            for key, value in state.items():
                # As on any device, the step counter stays on the host unless capturable; the moments are on "hpu".
                if isinstance(value, torch.Tensor) and key != "step":
                    assert value.device.type == "hpu", key
    for cpu_weight, hpu_weight in zip(weights["cpu"], weights["hpu"], strict=True):
        torch.testing.assert_close(hpu_weight, cpu_weight, rtol=0, atol=1e-6)


# --- in-place operations and views ------------------------------------------------------------------------------------


@isolated
def test_in_place_operations_and_views_share_memory() -> None:
    base = torch.zeros(4, 6, device="hpu")
    row = base[1]
    row.add_(1)
    assert base.cpu()[1].eq(1).all() and base.sum().item() == 6
    base.t()[2, 3] = 5.0  # the transpose's [2, 3] is base[3, 2]
    assert base[3, 2].item() == 5.0
    flat = base.view(24)
    flat[0] = 7.0
    assert base[0, 0].item() == 7.0
    block = base.reshape(2, 2, 6)[1, :, ::2]
    block.fill_(-1)
    assert base.cpu()[2:, ::2].eq(-1).all()
    assert base.cpu()[2:, 1::2].ne(-1).all()
    moved = base.transpose(0, 1).contiguous()
    moved.zero_()  # a copy: the base keeps its values
    assert base[0, 0].item() == 7.0
    result = base.mul_(2)
    assert result is base  # in-place operations return their input, as on any device
    assert row._base is base and row.storage_offset() == 6
    # autograd sees in-place changes through views: the version counter is shared.
    version = base._version
    row.sub_(1)
    assert base._version > version


def _metadata_changes(device: str) -> list[Any]:
    """In-place changes of shape, strides or storage, as ``matmul``, ``quantile`` or ``stft`` make them inside."""
    torch.manual_seed(0)
    seen: list[Any] = []
    x = torch.randn(3, 1, 4, device=device)
    for change in (
        lambda t: t.squeeze_(1),
        lambda t: t.unsqueeze_(0),
        lambda t: t.transpose_(1, 2),
        lambda t: t.squeeze_(0).t_(),
        lambda t: t.as_strided_((2, 2), (1, 3), 1),
        lambda t: t.resize_(5, 5),
        lambda t: t.resize_as_(torch.empty(2, 3, device=device)),
        lambda t: t.set_(torch.arange(6.0, device=device).view(2, 3)),
        lambda t: t.set_(torch.arange(8.0, device=device).untyped_storage(), 2, (2, 2), (1, 2)),
        lambda t: t.set_(),
    ):
        assert change(x) is x  # in place: the same tensor object, with its new metadata
        seen.append((tuple(x.shape), x.stride(), x.storage_offset(), x.cpu().tolist() if x.numel() < 10 else None))
    out = torch.empty(1, device=device)
    torch.add(torch.ones(2, 3, device=device), 1, out=torch.empty(0, device=device))
    with pytest.warns(UserWarning, match="was resized"):  # torch's own notice, on every device
        assert torch.mul(torch.ones(2, 3, device=device), 3, out=out) is out
    seen.append((tuple(out.shape), out.cpu().tolist()))
    return seen


@isolated
def test_in_place_metadata_changes_behave_as_on_the_cpu() -> None:
    assert _metadata_changes("hpu") == _metadata_changes("cpu")
    # The autograd view of them is the CPU's too, and a vector @ matrix (matmul squeezes in place) is differentiable.
    grads = []
    for device in ("cpu", "hpu"):
        torch.manual_seed(1)
        a = torch.randn(3, 1, 4, device=device, requires_grad=True)
        v = torch.randn(4, device=device, requires_grad=True)
        b = a * 2
        b.squeeze_(1).t_()
        loss = (v @ b).sum() + torch.quantile(a.flatten(), torch.tensor([0.25, 0.75], device=device)).sum()
        grads.append([g.cpu() for g in torch.autograd.grad(loss, [a, v])])
    for expected, actual in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(actual, expected)


@isolated
def test_tensor_split_takes_host_indices_as_on_every_device() -> None:
    x = torch.arange(12.0).reshape(6, 2)
    parts = torch.tensor_split(x.to("hpu"), torch.tensor([1, 4]))  # indices on the host, as torch requires
    assert [p.device.type for p in parts] == ["hpu"] * 3
    assert [p.cpu().tolist() for p in parts] == [p.tolist() for p in torch.tensor_split(x, torch.tensor([1, 4]))]
    # torch's own check (aten's composite, the same on CUDA and on Gaudi): the index tensor must be on the host.
    with pytest.raises(RuntimeError, match="tensor_split expected tensor_indices_or_sections to be on cpu"):
        torch.tensor_split(x.to("hpu"), torch.tensor([1, 4], device="hpu"))


# torch's own notice when a CSR tensor is made (on the host, here): its business, not the device's.
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
@isolated
def test_sparse_quantized_and_mkldnn_results_are_refused_with_what_to_do_instead() -> None:
    refusal = "the emulated HPU has no sparse tensors"
    with pytest.raises(NotImplementedError, match=f"aten::_to_sparse: {refusal}"):
        torch.eye(3, device="hpu").to_sparse()
    with pytest.raises(NotImplementedError, match=refusal):
        torch.eye(3).to_sparse().to("hpu")
    # Embedding(sparse=True) makes a sparse gradient in the backward pass: refused there, with the fix, not a crash.
    embedding = torch.nn.Embedding(10, 3, sparse=True).to("hpu")
    with pytest.raises(NotImplementedError, match=r"nn\.Embedding\(\.\.\., sparse=False\)"):
        embedding(torch.tensor([1, 2], device="hpu")).sum().backward()
    with pytest.raises(NotImplementedError):
        torch.eye(3).to_sparse_csr().to("hpu")
    # Quantized results would lose their quantizer on the HPU: refused, as the dispatcher refuses quantized HPU tensors.
    with pytest.raises(NotImplementedError, match=r"quantize_per_tensor: the emulated HPU has no quantized tensors"):
        torch.quantize_per_tensor(torch.ones(2, device="hpu"), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="QuantizedHPU"):
        torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8).to("hpu")
    # MKL-DNN is not sparse: a layout of the CPU only, refused as such.
    with pytest.raises(
        NotImplementedError, match=r"aten::to_mkldnn: the emulated HPU has no MKL-DNN \(oneDNN\) tensors"
    ):
        torch.eye(3, device="hpu").to_mkldnn()


@isolated
def test_zero_gradients_and_conjugate_views_work_as_on_the_host() -> None:
    grads = {}
    for device in ("hpu", "cpu"):
        # sgn of a real tensor has autograd's memoryless zero gradient (a ZeroTensor).
        x = torch.linspace(-1, 1, 5, device=device, requires_grad=True)
        torch.sgn(x).sum().backward()
        # hfft's backward goes through conjugate views.
        z = torch.arange(6.0, device=device).to(torch.complex64).requires_grad_()
        torch.fft.hfft(z).pow(2).sum().backward()
        grads[device] = (x.grad.cpu(), z.grad.cpu())
    torch.testing.assert_close(grads["hpu"], grads["cpu"])
    host = torch.tensor([1 + 2j, -3j], dtype=torch.complex64)
    on_hpu = host.to("hpu")
    assert torch.equal(on_hpu.conj().cpu(), host.conj())
    assert torch.equal(on_hpu.conj().resolve_conj().cpu(), host.conj())
    assert torch.equal(on_hpu.conj().imag.neg().cpu(), host.imag)
    into_conj_view = torch.zeros(2, dtype=torch.complex64).conj()
    into_conj_view.copy_(on_hpu)
    assert torch.equal(into_conj_view.resolve_conj(), host)


@isolated
def test_data_setter_replaces_the_data() -> None:
    param = torch.nn.Parameter(torch.ones(3, device="hpu"))
    param.data = torch.full((3,), 4.0, device="hpu")
    assert param.cpu().eq(4).all() and type(param) is torch.nn.Parameter and param.requires_grad
    # Between the host and the HPU too: torch swaps the implementation natively (FSDP's param.data swaps).
    param.data = torch.zeros(2)
    assert param.device.type == "cpu" and param.tolist() == [0.0, 0.0]
    param.data = torch.ones(2, device="hpu")
    assert param.device.type == "hpu" and type(param) is torch.nn.Parameter


# --- devices in one operation --------------------------------------------------------------------------------------


@isolated
def test_cpu_scalars_mix_with_hpu_tensors() -> None:
    tensor = torch.arange(4.0, device="hpu")
    assert (tensor + torch.tensor(1.0)).cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert (tensor * 2).device.type == "hpu"
    assert torch.where(tensor > 1, tensor, torch.tensor(0.0)).cpu().tolist() == [0.0, 0.0, 2.0, 3.0]
    # Indexing with host indices is allowed, as on real devices.
    assert tensor[torch.tensor([0, 3])].cpu().tolist() == [0.0, 3.0]


@isolated
def test_mixing_hpu_and_cpu_tensors_is_torchs_device_error() -> None:
    on_hpu = torch.ones(3, device="hpu")
    on_cpu = torch.ones(3)
    expected = re.escape("Expected all tensors to be on the same device, but found at least two devices, hpu:0 and cpu")
    with pytest.raises(RuntimeError, match=expected):
        on_hpu + on_cpu
    with pytest.raises(RuntimeError, match=expected):
        on_cpu * on_hpu
    with pytest.raises(RuntimeError, match=expected):
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3, device="hpu"))
    with pytest.raises(RuntimeError, match=expected):
        torch.cat([on_hpu, on_cpu])
    with pytest.raises(RuntimeError, match=expected):
        on_hpu.add_(on_cpu)


# --- randomness ------------------------------------------------------------------------------------------------------


@isolated
def test_manual_seed_makes_hpu_random_numbers_reproducible() -> None:
    torch.manual_seed(123)
    first = torch.randn(5, device="hpu").cpu()
    dropped = torch.nn.functional.dropout(torch.ones(100, device="hpu"), 0.5).cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.randn(5, device="hpu").cpu(), first)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(100, device="hpu"), 0.5).cpu(), dropped)
    # The HPU has a generator of its own, as on the SDK: an HPU draw does not move the host's generator.
    torch.manual_seed(123)
    host = torch.randn(5)
    torch.manual_seed(123)
    torch.randn(5, device="hpu")
    assert torch.equal(torch.randn(5), host)
    from lightning_accel.habana_emulator.hpu import random as hpu_random

    assert hpu_random.default_generators[0] is not torch.default_generator
    assert torch.Generator(device="hpu").device == torch.device("hpu", 0)
    torch.hpu.manual_seed_all(7)
    state = torch.hpu.get_rng_state()
    again = torch.rand(3, device="hpu").cpu()
    torch.hpu.set_rng_state(state)
    assert torch.equal(torch.rand(3, device="hpu").cpu(), again)


# --- serialization ---------------------------------------------------------------------------------------------------


@isolated
def test_save_and_load_tag_the_storages_hpu() -> None:
    tensor = torch.randn(3, 4, device="hpu")
    buffer = io.BytesIO()
    torch.save({"t": tensor, "n": 3}, buffer)
    buffer.seek(0)
    # The storage is tagged "hpu", as a Gaudi writes it, and restored to "hpu" without map_location, as on Gaudi.
    loaded = torch.load(buffer)
    assert loaded["t"].device == torch.device("hpu", 0) and torch.equal(loaded["t"].cpu(), tensor.cpu())
    buffer.seek(0)
    on_host = torch.load(buffer, map_location="cpu")
    assert on_host["t"].device == torch.device("cpu") and torch.equal(on_host["t"], tensor.cpu())
    # A map_location function (DeepSpeed loads with one) sees the "hpu" location tag.
    buffer.seek(0)
    seen: list[str] = []
    by_function = torch.load(buffer, map_location=lambda storage, location: seen.append(location) or storage)
    assert seen == ["hpu:0"] and torch.equal(by_function["t"], tensor.cpu())


@isolated
def test_state_dict_round_trip(tmp_path: Path) -> None:
    model = _mlp(seed=3).to("hpu")
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    host_state = torch.load(path, map_location="cpu")
    assert all(value.device.type == "cpu" for value in host_state.values())
    reference = _mlp(seed=3)
    for key, value in reference.state_dict().items():
        assert torch.equal(host_state[key], value), key
    # Loading a host state dict into a model on "hpu" copies onto the device.
    target = _mlp(seed=99).to("hpu")
    target.load_state_dict(host_state)
    for key, value in target.state_dict().items():
        assert value.device.type == "hpu" and torch.equal(value.cpu(), host_state[key]), key
    # Without map_location the storages go back to "hpu", as on Gaudi, weights_only included.
    restored = torch.load(path, weights_only=True)
    assert all(value.device.type == "hpu" for value in restored.values())
    for key, value in reference.state_dict().items():
        assert torch.equal(restored[key].cpu(), value), key


# --- memory accounting -----------------------------------------------------------------------------------------------


class _Snapshot:
    """The SDK's memory statistics under short names."""

    def __init__(self, stats: dict[str, int]) -> None:
        self.in_use, self.max_in_use = stats["InUse"], stats["MaxInUse"]
        self.num_allocs, self.num_frees = stats["NumAllocs"], stats["NumFrees"]
        self.active_allocs, self.max_alloc_size, self.limit = (
            stats["ActiveAllocs"],
            stats["MaxAllocSize"],
            stats["Limit"],
        )


def memory_snapshot(device: Any = None) -> _Snapshot:
    from lightning_accel.habana_emulator import hpu

    return _Snapshot(hpu.memory_stats(device))


def reset_peak() -> None:
    from lightning_accel.habana_emulator import hpu

    hpu.reset_peak_memory_stats()


@isolated
def test_memory_accounting_is_exact() -> None:
    before = memory_snapshot()
    tensor = torch.empty(MIB // 4, dtype=torch.float32, device="hpu")  # exactly 1 MiB
    during = memory_snapshot("hpu")
    assert during.in_use - before.in_use == MIB
    assert during.num_allocs - before.num_allocs == 1
    assert during.active_allocs - before.active_allocs == 1
    assert during.max_alloc_size >= MIB and during.max_in_use >= during.in_use
    assert during.limit > 0
    # Views and in-place operations allocate nothing.
    view = tensor[: MIB // 8]
    view.fill_(1.0)
    tensor.mul_(2)
    assert memory_snapshot(0).in_use == during.in_use
    assert memory_snapshot(0).num_allocs == during.num_allocs
    # An operation's result is one allocation of its exact size.
    doubled = tensor[:1024] * 2
    assert memory_snapshot().in_use - during.in_use == 1024 * 4
    del doubled
    del view, tensor
    after = memory_snapshot()
    assert after.in_use == before.in_use
    assert after.num_frees - before.num_frees == 2
    assert after.max_in_use >= before.in_use + MIB
    reset_peak()
    assert memory_snapshot().max_in_use == after.in_use
    # Host tensors are not device memory.
    host = torch.empty(MIB)
    assert memory_snapshot().in_use == after.in_use
    del host


@isolated
def test_memory_accounting_sees_tensors_held_by_autograd() -> None:
    weight = torch.randn(256, 256, device="hpu", requires_grad=True)
    start = memory_snapshot().in_use
    hidden = torch.relu(torch.randn(64, 256, device="hpu") @ weight)  # relu keeps its output for backward
    loss = hidden.sum()
    held = memory_snapshot().in_use
    assert held > start
    del hidden
    # Still referenced by autograd's saved tensors: not freed.
    assert memory_snapshot().in_use >= held - 4
    loss.backward()
    del loss
    assert weight.grad is not None
    assert memory_snapshot().in_use == start + 256 * 256 * 4  # only the gradient is left


# --- collectives -----------------------------------------------------------------------------------------------------

_ALL_REDUCE_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist
    import habana_frameworks.torch.distributed.hccl
    rank = int(os.environ["RANK"])
    dist.init_process_group("hccl", rank=rank, world_size=2)
    tensor = torch.full((4,), float(rank + 1), device="hpu")
    dist.all_reduce(tensor)
    assert tensor.device.type == "hpu", tensor.device
    assert tensor.cpu().tolist() == [3.0] * 4, tensor.cpu().tolist()
    gathered = [torch.zeros(2, device="hpu") for _ in range(2)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device="hpu"))
    assert [g.cpu().tolist() for g in gathered] == [[0.0, 0.0], [1.0, 1.0]]
    source = torch.arange(3.0, device="hpu") if rank == 0 else torch.zeros(3, device="hpu")
    dist.broadcast(source, src=0)
    assert source.cpu().tolist() == [0.0, 1.0, 2.0]
    # Every reducing collective, reduce_scatter_single (FSDP2's gradient reduction) included, refuses what HCCL lacks.
    out = lambda: torch.zeros(2, device="hpu")
    calls = {
        "all_reduce": lambda op: dist.all_reduce(torch.ones(2, device="hpu"), op=op),
        "all_reduce_coalesced": lambda op: dist.all_reduce_coalesced([torch.ones(2, device="hpu")], op=op),
        "reduce": lambda op: dist.reduce(torch.ones(2, device="hpu"), dst=0, op=op),
        "reduce_scatter_tensor": lambda op: dist.reduce_scatter_tensor(out(), torch.ones(4, device="hpu"), op=op),
        "reduce_scatter_single": lambda op: dist.reduce_scatter_single(out(), torch.ones(4, device="hpu"), op=op),
        "reduce_scatter": lambda op: dist.reduce_scatter(out(), [out(), out()], op=op),
    }
    for name, call in calls.items():
        for op in (dist.ReduceOp.AVG, dist._make_nccl_premul_sum(0.5)):
            try:
                call(op)
            except ValueError as error:
                assert "not supported by the 'hccl' backend" in str(error), error
            else:
                raise AssertionError(f"{name} accepted {op}; HCCL has MIN, MAX, SUM and PRODUCT only")
    summed = torch.zeros(2, device="hpu")
    dist.reduce_scatter_single(summed, torch.full((4,), float(rank + 1), device="hpu"))
    assert summed.cpu().tolist() == [3.0, 3.0], summed.cpu().tolist()
    for op, expected in ((dist.ReduceOp.MAX, 2.0), (dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.PRODUCT, 2.0)):
        value = torch.full((2,), float(rank + 1), device="hpu")
        dist.all_reduce(value, op=op)
        assert value.cpu().tolist() == [expected] * 2, (op, value)
    dist.barrier()
    dist.destroy_process_group()
    print("ok", rank)
    """
)


def _run_two_ranks(script: str) -> None:
    """Run ``script`` as ranks 0 and 1 of one job; each must exit cleanly and print ``ok <rank>``."""
    port = str(free_port())
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    for rank, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"rank {rank}:\n{output}"
        assert f"ok {rank}" in output


@isolated
def test_hccl_collectives_on_hpu_tensors() -> None:
    _run_two_ranks(_ALL_REDUCE_SCRIPT)


_SYNC_BATCH_NORM_SCRIPT = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist
    import habana_frameworks.torch.distributed.hccl
    rank = int(os.environ["RANK"])
    dist.init_process_group("hccl", rank=rank, world_size=2)
    torch.manual_seed(0)
    batch = torch.randn(8, 4, 5) * 3 + 1
    weights = torch.arange(20.0).reshape(1, 4, 5)
    reference = torch.nn.BatchNorm1d(4)  # the whole batch in one process, on the host
    whole = batch.clone().requires_grad_()
    expected = reference(whole)
    (expected * weights).sum().backward()
    synced = torch.nn.SyncBatchNorm(4).to("hpu")  # each rank holds half of the batch
    half = batch[rank * 4 : (rank + 1) * 4].clone().to("hpu").requires_grad_()
    out = synced(half)
    (out * weights.to("hpu")).sum().backward()
    rows = slice(rank * 4, (rank + 1) * 4)
    torch.testing.assert_close(out.detach().cpu(), expected[rows].detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(synced.running_mean.cpu(), reference.running_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(synced.running_var.cpu(), reference.running_var, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(half.grad.cpu(), whole.grad[rows], atol=1e-4, rtol=1e-4)
    weight_grad = synced.weight.grad.clone()
    dist.all_reduce(weight_grad)
    torch.testing.assert_close(weight_grad.cpu(), reference.weight.grad, atol=1e-4, rtol=1e-4)
    dist.destroy_process_group()
    print("ok", rank)
    """
)


@isolated
def test_sync_batch_norm_over_two_hpus_equals_batch_norm_over_the_whole_batch() -> None:
    # The SDK has HPU kernels for SyncBatchNorm's five operators (hpu_op.yaml); the CPU, whose kernels the device
    # runs, has none. And all_gather_into_tensor fills its output rank after rank in memory, as HCCL does.
    _run_two_ranks(_SYNC_BATCH_NORM_SCRIPT)


@isolated
def test_backward_runs_through_autograds_device_thread() -> None:
    # The C++ device's guard gives autograd's HPU worker thread what it needs (streams, events): hooks run once.
    import threading

    ran_on: list[threading.Thread] = []
    x = torch.randn(3, device="hpu", requires_grad=True)
    doubled = x * 2
    doubled.register_hook(lambda grad: ran_on.append(threading.current_thread()))
    doubled.sum().backward()
    assert len(ran_on) == 1
    assert x.grad is not None and x.grad.cpu().tolist() == [2.0, 2.0, 2.0]
