"""The C++ device against what a Gaudi user's code sees of an HPU: plain tensors on c10's HPU key, one device, the
SDK's own generator, exact memory, training that matches the host bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
from native_helpers import run_script

DIGITS = Path(__file__).resolve().parents[4] / "examples" / "digits.pt"


def test_hpu_tensors_are_plain_torch_tensors_on_the_hpu_dispatch_key(on_device):
    result = on_device(
        """
        import torch
        x = torch.ones(3, 4, device="hpu")
        layer = torch.nn.Linear(4, 2).to("hpu")
        report(
            type=type(x).__qualname__,
            device=str(x.device),
            keys=str(torch._C._dispatch_keys(x)),
            parameter=type(layer.weight).__qualname__,
            parameter_device=str(layer.weight.device),
            from_host=str(torch.arange(3).to("hpu").device),
        )
        """
    )
    assert result == {
        "type": "Tensor",
        "device": "hpu:0",
        "keys": "DispatchKeySet(HPU, ADInplaceOrView, AutogradHPU, AutocastHPU)",
        "parameter": "Parameter",
        "parameter_device": "hpu:0",
        "from_host": "hpu:0",
    }


def test_training_on_the_hpu_gives_the_host_losses_exactly(on_device):
    result = on_device(
        f"""
        import torch

        # The repository's 8x8 digits (examples/digits.pt): this suite tests the SDK without lightning-accel's core.
        digits = torch.load({str(DIGITS)!r}, weights_only=True)
        features = digits["features"][:512].float() / 16
        labels = digits["labels"][:512].long()

        def train(device):
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(64, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Dropout(0.0),
                torch.nn.Linear(32, 10),
            ).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
            x, y = features.to(device), labels.to(device)
            losses = []
            for step in range(20):
                batch = slice(step * 16 % 512, step * 16 % 512 + 64)
                loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                losses.append(loss.item())
            return losses, [type(p).__qualname__ for p in model.parameters()]

        host, _ = train("cpu")
        hpu, kinds = train("hpu")
        report(host=host, hpu=hpu, kinds=sorted(set(kinds)))
        """
    )
    assert result["hpu"] == result["host"]  # the same kernels on the same memory: bit for bit
    assert result["hpu"][-1] < 0.5 * result["hpu"][0]  # and it learns
    assert result["kinds"] == ["Parameter"]


def test_indices_other_than_zero_are_refused_as_the_sdks_guard_refuses_them(on_device):
    result = on_device(
        """
        import torch
        errors = []
        for make in (lambda: torch.ones(2, device="hpu:1"), lambda: torch.ones(2).to("hpu:3")):
            try:
                make()
                errors.append(None)
            except RuntimeError as error:
                errors.append(str(error).splitlines()[0])
        report(errors=errors, count=torch._C._get_accelerator().type if hasattr(torch._C, "_get_accelerator") else "")
        """
    )
    assert result["errors"] == ["habana active device: 1 != 0", "habana active device: 3 != 0"]


def test_the_hpu_has_a_generator_of_its_own(on_device):
    result = on_device(
        """
        import torch
        torch.manual_seed(0)
        reference = torch.randn(3)
        torch.manual_seed(0)
        torch.randn(3, device="hpu")  # draws from the HPU's generator, not the host's
        after_hpu_draw = torch.randn(3)

        default = device.default_generator()
        state = default.get_state()
        first = torch.randn(4, device="hpu")
        default.set_state(state)
        again = torch.randn(4, device="hpu")

        own = torch.Generator(device="hpu").manual_seed(7)
        seeded = torch.rand(5, device="hpu", generator=own)
        own.manual_seed(7)
        reseeded = torch.rand(5, device="hpu", generator=own)
        try:
            torch.rand(2, device="hpu", generator=torch.Generator())
            host_generator_error = None
        except RuntimeError as error:
            host_generator_error = str(error).splitlines()[0]
        report(
            host_untouched=torch.equal(reference, after_hpu_draw),
            default_device=str(default.device),
            same_object=default is device.default_generator(),
            rewinds=torch.equal(first.cpu(), again.cpu()),
            own_device=str(own.device),
            reproducible=torch.equal(seeded.cpu(), reseeded.cpu()),
            dropout_device=str(torch.nn.functional.dropout(torch.ones(8, device="hpu"), 0.5).device),
            host_generator_error=host_generator_error,
        )
        """
    )
    assert result["host_untouched"], "an HPU draw moved the host generator"
    assert result["default_device"] == "hpu:0" and result["same_object"]
    assert result["rewinds"] and result["reproducible"]
    assert result["own_device"] == "hpu:0"
    assert result["dropout_device"] == "hpu:0"
    assert "expected a generator of the 'hpu' device" in result["host_generator_error"]


def test_memory_accounting_is_exact(on_device):
    result = on_device(
        """
        import gc, torch
        base = device.memory_stats()
        x = torch.empty(1000, 25, device="hpu")  # 100000 bytes
        after_empty = device.memory_stats()
        y = x + 1  # a kernel's output becomes device memory without a copy
        after_add = device.memory_stats()
        v = x.t()[3:]  # views take nothing
        after_view = device.memory_stats()
        del x, y, v
        gc.collect()
        end = device.memory_stats()
        report(base=base, after_empty=after_empty, after_add=after_add, after_view=after_view, end=end)
        """
    )
    base = result["base"]["in_use"]
    assert result["after_empty"]["in_use"] - base == 100_000
    assert result["after_add"]["in_use"] - base == 200_000
    assert result["after_view"]["in_use"] - base == 200_000
    assert result["end"]["in_use"] == base
    assert result["after_add"]["peak"] >= base + 200_000
    assert result["end"]["active_allocs"] == result["base"]["active_allocs"]


def test_views_in_place_and_out_arguments_write_through_to_the_same_memory(on_device):
    result = on_device(
        """
        import torch
        x = torch.zeros(3, 4, device="hpu")
        x.t()[1, 2] = 5.0  # a view's write lands in its base
        row = x[2]
        row.add_(1)  # in place on a view
        out = torch.empty(0, device="hpu")
        torch.mul(x, 2, out=out)  # out= resized by the kernel
        y = torch.arange(6.0, device="hpu")
        y.resize_(2, 3)
        z = torch.ones(4, device="hpu")
        z.set_(y.untyped_storage(), 0, (3,), (1,))
        report(
            x=x.cpu().tolist(),
            out=out.cpu().tolist(),
            out_device=str(out.device),
            y=y.cpu().tolist(),
            z=z.cpu().tolist(),
            shares=z.untyped_storage().data_ptr() == y.untyped_storage().data_ptr(),
            is_view=row._base is x,
            real=torch.view_as_real(torch.ones(2, dtype=torch.complex64, device="hpu")).cpu().tolist(),
        )
        """
    )
    assert result["x"] == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 6, 1, 1]]
    assert result["out"] == [[0, 0, 0, 0], [0, 0, 0, 0], [2, 12, 2, 2]] and result["out_device"] == "hpu:0"
    assert result["y"] == [[0, 1, 2], [3, 4, 5]]
    assert result["z"] == [0, 1, 2] and result["shares"]
    assert result["is_view"]
    assert result["real"] == [[1, 0], [1, 0]]


def test_mixing_hpu_and_host_tensors_is_torchs_device_error(on_device):
    result = on_device(
        """
        import torch
        x = torch.ones(3, device="hpu")
        try:
            x + torch.ones(3)
            error = None
        except RuntimeError as e:
            error = str(e).splitlines()[0]
        scalar = (x + torch.tensor(2.0)).cpu().tolist()  # a 0-dim host tensor is a scalar, as on CUDA
        indexed = x[torch.tensor([0, 2])].cpu().tolist()  # host indices are allowed, as on CUDA
        report(error=error, scalar=scalar, indexed=indexed)
        """
    )
    assert result["error"].startswith(
        "Expected all tensors to be on the same device, but found at least two devices, hpu:0 and cpu!"
    )
    assert result["scalar"] == [3, 3, 3]
    assert result["indexed"] == [1, 1]


def test_loading_the_device_changes_nothing_in_torchs_python_api(device_env):
    code = """
import json, sys, torch
def snapshot():
    return {name: sorted((k, id(v)) for k, v in vars(obj).items())
            for name, obj in (("torch", torch), ("Tensor", torch.Tensor), ("TensorBase", torch._C.TensorBase),
                              ("Generator", torch.Generator), ("Parameter", torch.nn.Parameter))}
before = snapshot()
from lightning_accel import emulated_hpu
emulated_hpu.load()
after = snapshot()
changed = {name: sorted({k for k, _ in set(after[name]) ^ set(before[name])}) for name in before}
print(json.dumps({name: keys for name, keys in changed.items() if keys}))
"""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], env=device_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def test_a_cached_build_is_loaded_without_building_again(built_device, device_env):
    result = run_script("report(ok=True)", env=device_env)
    assert "building the emulated HPU device" not in result.stderr


def test_without_a_compiler_the_error_says_what_to_install(monkeypatch, tmp_path):
    from lightning_accel.emulated_hpu import _build

    monkeypatch.setenv("CXX", "no-such-compiler-here")
    with pytest.raises(_build.DeviceBuildError, match=r"no C\+\+ compiler was found \(CXX='no-such-compiler-here'"):
        _build._check_toolchain()


def test_an_unsupported_torch_is_refused_by_name():
    from lightning_accel.emulated_hpu import DeviceBuildError, check_torch

    check_torch("2.13.0+cpu")
    with pytest.raises(DeviceBuildError, match=r"supports torch 2\.13, but torch==2\.12\.1 is installed"):
        check_torch("2.12.1")


def test_float64_and_int64_are_computed_as_the_sdk_computes_them(on_device):
    result = on_device(
        """
        import torch
        def probe():
            big = torch.tensor([2**31 - 1], device="hpu")
            fine = torch.tensor([1.0], dtype=torch.float64, device="hpu")
            return {
                "int64": (big + 1).item(),
                "int64_dtype": str((big + 1).dtype),
                "float64": (fine + 1e-12).item(),
                "float64_dtype": str((fine + 1e-12).dtype),
                "copied": torch.tensor([1.0 + 1e-12], dtype=torch.float64).to("hpu").item(),
            }
        default = probe()  # eager mode: int64 is supported, float64 never is
        device.set_internal_dtypes(float64_as_float32=True, int64_as_int32=True)
        lazy = probe()  # lazy mode: int64 is computed as int32 on the card
        device.set_internal_dtypes(float64_as_float32=False, int64_as_int32=False)
        exact = probe()
        report(default=default, lazy=lazy, exact=exact)
        """
    )
    assert result["default"] == {
        "int64": 2**31,
        "int64_dtype": "torch.int64",
        "float64": 1.0,
        "float64_dtype": "torch.float64",
        "copied": 1.0,
    }
    assert result["lazy"]["int64"] == -(2**31) and result["lazy"]["int64_dtype"] == "torch.int64"
    assert result["lazy"]["float64"] == 1.0
    assert result["exact"]["int64"] == 2**31 and result["exact"]["float64"] == 1.0 + 1e-12
