"""The SDK's fp8 operators on the HPU: ``torch.ops.hpu.cast_to_fp8_v2``, ``cast_from_fp8``, ``fp8_gemm_v2``.

Intel Neural Compressor's fp8 layers call them on Gaudi. Their schemas are the bridge's (gaudi-pytorch-bridge 1.19.0,
``habana_eager/eager_custom_op_register.cpp:2146-2171``); the numbers are fp8's: torch's ``float8_e4m3fn`` /
``float8_e5m2`` rounding, saturated at the format's largest value on the (emulated) Gaudi2.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.emulator_only

# The bridge's registrations, verbatim (eager_custom_op_register.cpp:2146-2171; kernels_register.cpp:2429-2451).
BRIDGE_SCHEMAS = [
    "hpu::cast_from_fp8(Tensor input, Tensor? scale, ScalarType out_dtype, int[]? scale_shape=None) -> Tensor",
    "hpu::cast_from_fp8.scalar(Tensor input, float scale, ScalarType out_dtype, int[]? scale_shape=None) -> Tensor",
    "hpu::cast_from_fp8.scalar_list(Tensor input, float[] scale, ScalarType out_dtype, int[]? scale_shape=None) -> "
    "Tensor",
    "hpu::cast_to_fp8_v2(Tensor input, Tensor? scale=None, bool stochastic_rounding=False, bool is_amax=False, "
    "ScalarType dtype=None, int[]? scale_shape=None) -> (Tensor, Tensor)",
    "hpu::cast_to_fp8_v2.scalar(Tensor input, float scale, bool stochastic_rounding=False, bool is_amax=False, "
    "ScalarType dtype=None, int[]? scale_shape=None) -> (Tensor, Tensor)",
    "hpu::cast_to_fp8_v2.scalar_list(Tensor input, float[] scale, bool stochastic_rounding=False, bool is_amax=False, "
    "ScalarType dtype=None, int[]? scale_shape=None) -> (Tensor, Tensor)",
    "hpu::fp8_gemm_v2(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
    "Tensor? A_scale_inv=None, Tensor? B_scale_inv=None, Tensor? bias=None, bool accumulate=False, "
    "int[]? B_scale_shape=None) -> Tensor",
    "hpu::fp8_gemm_v2.scalar(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
    "float A_scale_inv, float B_scale_inv, Tensor? bias=None, bool accumulate=False, int[]? B_scale_shape=None) -> "
    "Tensor",
    "hpu::fp8_gemm_v2.scalar_list(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
    "float[] A_scale_inv, float[] B_scale_inv, Tensor? bias=None, bool accumulate=False, int[]? B_scale_shape=None) "
    "-> Tensor",
]


def _schemas() -> list[str]:
    found = []
    for name in ("cast_from_fp8", "cast_to_fp8_v2", "fp8_gemm_v2"):
        packet = getattr(torch.ops.hpu, name)
        for overload in ("default", "scalar", "scalar_list"):
            found.append(str(getattr(packet, overload)._schema))
    return found


def test_the_operators_have_the_bridges_schemas() -> None:
    assert _schemas() == BRIDGE_SCHEMAS


def test_cast_to_fp8_rounds_to_nearest_even_scales_and_saturates_at_gaudi2s_e4m3_range() -> None:
    # E4M3 near 1 has the steps 1, 1.125, 1.25: the halfway values go to the even neighbour.
    x = torch.tensor([1.0625, 1.1875, 3.0, 300.0, -1e6, 0.0], device="hpu")
    casted, amax = torch.ops.hpu.cast_to_fp8_v2(x, None, False, False, torch.float8_e4m3fn)
    assert casted.dtype == torch.float8_e4m3fn and casted.device.type == "hpu"
    assert casted.float().cpu().tolist() == [1.0, 1.25, 3.0, 240.0, -240.0, 0.0]  # 240: Gaudi2's largest E4M3
    assert amax.numel() == 0  # no amax asked for
    scaled, amax = torch.ops.hpu.cast_to_fp8_v2.scalar(x[:3], 0.5, False, True, torch.float8_e4m3fn)
    assert scaled.float().cpu().tolist() == [0.5, 0.625, 1.5]  # the scale multiplies before the cast
    assert amax.dim() == 0 and float(amax) == 3.0  # the input's absolute maximum, before scaling
    e5m2, _ = torch.ops.hpu.cast_to_fp8_v2(
        torch.tensor([1e6, 1.125], device="hpu"), torch.tensor([1.0], device="hpu"), False, False, torch.float8_e5m2
    )
    assert e5m2.float().cpu().tolist() == [57344.0, 1.0]  # E5M2 has steps 1, 1.25 near 1


def test_stochastic_rounding_is_unbiased_where_nearest_even_is_not() -> None:
    x = torch.full((20000,), 1.0625, device="hpu")
    nearest, _ = torch.ops.hpu.cast_to_fp8_v2(x, None, False, False, torch.float8_e4m3fn)
    stochastic, _ = torch.ops.hpu.cast_to_fp8_v2(x, None, True, False, torch.float8_e4m3fn)
    assert float(nearest.float().mean()) == 1.0
    values = set(stochastic.float().cpu().tolist())
    assert values == {1.0, 1.125}
    assert abs(float(stochastic.float().mean()) - 1.0625) < 0.003  # half up, half down: 6 sigma is 0.0021


def test_a_per_channel_scale_takes_scale_shape() -> None:
    weight = torch.ones(3, 2, device="hpu")
    scales = torch.tensor([1.0, 2.0, 4.0], device="hpu")
    casted, _ = torch.ops.hpu.cast_to_fp8_v2(weight, scales, False, False, torch.float8_e4m3fn, [3, 1])
    assert casted.float().cpu().tolist() == [[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]]
    with pytest.raises(RuntimeError, match=r"Number of scale elements \(3\) is not equal to number of scale_shape"):
        torch.ops.hpu.cast_to_fp8_v2(weight, scales, False, False, torch.float8_e4m3fn, [2, 1])


def test_cast_from_fp8_scales_back_to_float32_or_bfloat16_only() -> None:
    fp8 = torch.tensor([1.5, -2.0], device="hpu").to(torch.float8_e4m3fn)
    back = torch.ops.hpu.cast_from_fp8.scalar(fp8, 4.0, torch.bfloat16)
    assert back.dtype == torch.bfloat16 and back.float().cpu().tolist() == [6.0, -8.0]
    with pytest.raises(RuntimeError, match="CastFromFp8 output dtype must be equal to float or bfloat16"):
        torch.ops.hpu.cast_from_fp8(fp8, None, torch.float16)


def test_fp8_gemm_multiplies_the_scaled_operands_adds_bias_and_accumulates() -> None:
    a = torch.tensor([[1.0, 2.0], [0.5, -1.0]], device="hpu").to(torch.float8_e4m3fn)
    b = torch.tensor([[1.0, 0.0], [2.0, 1.0], [0.0, -3.0]], device="hpu").to(torch.float8_e4m3fn)  # (out, in)
    bias = torch.tensor([1.0, 0.0, -1.0], device="hpu")
    out = torch.ops.hpu.fp8_gemm_v2.scalar(a, False, b, True, None, torch.float32, 2.0, 0.5, bias)
    # (2 a) @ (0.5 b).T + bias
    assert out.cpu().tolist() == [[2.0, 4.0, -7.0], [1.5, 0.0, 2.0]]
    d = torch.ones(2, 3, device="hpu")
    accumulated = torch.ops.hpu.fp8_gemm_v2(a, False, b, True, d, torch.bfloat16, None, None, None, True)
    assert accumulated.dtype == torch.bfloat16
    assert accumulated.float().cpu().tolist() == [[2.0, 5.0, -5.0], [1.5, 1.0, 4.0]]
    with pytest.raises(RuntimeError, match="Accumulation tensor must be provided at index 4 for Fp8GemmV2"):
        torch.ops.hpu.fp8_gemm_v2(a, False, b, True, None, torch.float32, None, None, None, True)
