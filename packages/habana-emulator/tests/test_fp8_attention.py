"""The emulated fp8 attention kernel (``hpex.kernels.fp8_fused_sdpa``, ``fp8_sdpa_fwd_wrapper``).

Gaudi's kernel attends on fp8 q, k and v with their inverse scales (gaudi-pytorch-bridge bcc5172,
``hpex/kernels/Fp8FusedSDPA.py``); the emulator's numbers are attention on the exactly dequantized values, which these
tests check against the emulated ``FusedSDPA`` on those values.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytestmark = pytest.mark.emulator_only


def _fused_sdpa(*args: Any) -> Any:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    return FusedSDPA.apply(*args)


def _qkv(kv_heads: int = 4, requires_grad: bool = True, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(2, 4, 8, 16), (2, kv_heads, 8, 16), (2, kv_heads, 8, 16)]
    return [
        torch.randn(shape, generator=generator).to("hpu", torch.bfloat16).requires_grad_(requires_grad)
        for shape in shapes
    ]


def test_the_fp8_kernel_on_fp8_inputs() -> None:
    from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa

    q, k, v = _qkv(requires_grad=False)
    scale = torch.tensor(0.5, device="hpu")
    q8, k8, v8 = ((t.float() * scale).to(torch.float8_e4m3fn) for t in (q, k, v))
    d_scale = 1.0 / scale
    out, amax_s, amax_o = fp8_fused_sdpa(
        q8, k8, v8, None, 0.0, False, None, "None", d_scale, d_scale, d_scale, None, is_amax_s=True
    )
    values = [t.float() * d_scale for t in (q8, k8, v8)]
    expected, probs = _fused_sdpa(*values, None, 0.0, False, None, "None", False, None, "left", False, True)
    assert torch.equal(out, expected.to(torch.bfloat16)) and amax_o is None
    torch.testing.assert_close(amax_s.reshape(()), probs.max())


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ({"window_size": (4, 0)}, "window_size=(4, 0) is not emulated"),
        ({"sink": torch.zeros(1)}, "sink=<a tensor> is not emulated"),
        ({"q_scale_o": torch.ones(1)}, "q_scale_o=<a tensor> is not emulated"),
    ],
)
def test_the_fp8_kernel_refuses_what_it_does_not_emulate(argument: dict[str, Any], message: str) -> None:
    from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa

    q = torch.randn(1, 2, 4, 8, device="hpu").to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fp8_fused_sdpa(q, q, q, is_causal=True, **argument)
