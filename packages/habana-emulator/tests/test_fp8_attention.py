"""The Transformer Engine's ``FusedAttention`` and the fp8 attention kernel (``hpex.kernels.fp8_fused_sdpa``).

Inside ``fp8_autocast`` the layer casts q, k, v to fp8 with the forward scales (slots Q, K, V), attends on them and
records the amax of the softmax output S (slot ``GEMM2_WEIGHT``); its backward casts the output gradient to fp8
(slot ``GRAD_OUTPUT1``) and records the amax of dS (``GRAD_OUTPUT2``): gaudi-pytorch-bridge 1.18.0,
``transformer_engine/module/attention.py:36-41, 88-141, 196-233``. The emulator's numbers are attention on the
exactly dequantized fp8 values, which these tests check against the emulated ``FusedSDPA`` on those values.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytestmark = pytest.mark.emulator_only

Q, K, V, S = 0, 1, 2, 3  # the forward slots (attention.py:36-39)
DO, DS = 0, 1  # the backward slots (attention.py:40-41)


@pytest.fixture
def te() -> Any:
    return te_module()


def _recipe(fmt: str = "E5M2") -> Any:
    from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import DelayedScaling, Format

    return DelayedScaling(fp8_format=Format[fmt])


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


def _dequantized(tensor: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The emulated cast_to_fp8: times the scale, saturated, rounded to fp8; then back by the inverse scale.
    fp8_max = torch.finfo(dtype).max if dtype == torch.float8_e5m2 else 240.0
    return (tensor.detach().float() * scale).clamp(-fp8_max, fp8_max).to(dtype).float() * (1.0 / scale)


def _two_steps(layer: Any, qkv: list[torch.Tensor], mask: torch.Tensor | None = None, recipe: Any = None) -> Any:
    """Two fp8 runs, so that the second casts with scales delayed scaling derived from the first's amaxes."""
    recipe = recipe or _recipe()
    for _ in range(2):
        with te_module().fp8_autocast(enabled=True, fp8_recipe=recipe):
            out = layer(*qkv, mask, True)
    return out


def te_module() -> Any:
    import habana_frameworks.torch.hpex.experimental.transformer_engine as te

    return te


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("with_mask", [False, True], ids=["causal", "causal+mask"])
def test_forward_is_attention_on_the_quantize_dequantized_inputs(te: Any, kv_heads: int, with_mask: bool) -> None:
    layer = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
    qkv = _qkv(kv_heads)
    mask = torch.zeros(2, 1, 8, 8, device="hpu", dtype=torch.bfloat16) if with_mask else None
    if mask is not None:
        mask[:, :, :, 1] = -1e4  # every row but the first loses its second key
    out = _two_steps(layer, qkv, mask)
    meta = layer.fp8_meta["scaling_fwd"]
    assert not torch.equal(meta.scale[:3].cpu(), torch.ones(3)), "the second run must cast with derived scales"
    values = [_dequantized(t, meta.scale[slot], torch.float8_e5m2) for t, slot in zip(qkv, (Q, K, V), strict=True)]
    expected = _fused_sdpa(*values, mask, 0.0, True).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected)
    # And close to bf16 attention on the inputs themselves (E5M2 keeps 2 mantissa bits).
    torch.testing.assert_close(out, _fused_sdpa(*qkv, mask, 0.0, True), atol=0.5, rtol=0.1)


def test_backward_is_the_attention_backward_on_the_quantize_dequantized_values(te: Any) -> None:
    layer = te.FusedAttention(scale=0.3, attention_dropout=0.0, enable_recompute=False)
    qkv = _qkv(kv_heads=2)
    dout = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(1)).to("hpu", torch.bfloat16)
    out = _two_steps(layer, qkv)
    out.backward(dout)
    fwd, bwd = layer.fp8_meta["scaling_fwd"], layer.fp8_meta["scaling_bwd"]
    values = [
        _dequantized(t, fwd.scale[slot], torch.float8_e5m2).requires_grad_()
        for t, slot in zip(qkv, (Q, K, V), strict=True)
    ]
    reference = _fused_sdpa(*values, None, 0.0, True, 0.3)
    reference.backward(_dequantized(dout, bwd.scale[DO], torch.float8_e5m2))
    for ours, theirs in zip(qkv, values, strict=True):
        assert ours.grad is not None and theirs.grad is not None
        assert ours.grad.dtype == torch.bfloat16 and torch.isfinite(ours.grad).all()
        assert torch.equal(ours.grad, theirs.grad.to(torch.bfloat16))
    # Close to the gradients of bf16 attention on the inputs themselves.
    plain = [t.detach().clone().requires_grad_() for t in qkv]
    _fused_sdpa(*plain, None, 0.0, True, 0.3).backward(dout)
    for ours, bf16 in zip(qkv, plain, strict=True):
        assert ours.grad is not None and bf16.grad is not None
        torch.testing.assert_close(ours.grad, bf16.grad, atol=0.5, rtol=0.25)


def test_the_amaxes_of_s_and_ds_are_recorded_in_their_slots(te: Any) -> None:
    layer = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
    qkv = _qkv()
    mask = torch.zeros(2, 1, 8, 8, device="hpu", dtype=torch.bfloat16)
    mask[:, :, 0, 0] = float("-inf")  # the first row (its only key, causal) is masked: no probability is 1
    dout = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(2)).to("hpu", torch.bfloat16)
    with te.fp8_autocast(enabled=True, fp8_recipe=_recipe()):
        out = layer(*qkv, mask, True)
    out.backward(dout)
    fwd, bwd = layer.fp8_meta["scaling_fwd"], layer.fp8_meta["scaling_bwd"]
    # The reference: the softmax input as a leaf, so that its gradient is dS.
    q, k, v = (_dequantized(t, fwd.scale[slot], torch.float8_e5m2) for t, slot in zip(qkv, (Q, K, V), strict=True))
    scores = (q @ k.transpose(-2, -1) / 4.0 + mask.float()).masked_fill(
        ~torch.ones(8, 8).tril().bool().to("hpu"), -1e30
    )
    scores = scores.detach().requires_grad_()
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    (probs @ v).backward(_dequantized(dout, bwd.scale[DO], torch.float8_e5m2))
    assert scores.grad is not None
    for meta, slot, expected in (
        (fwd, Q, qkv[0].detach().abs().max()),
        (fwd, S, probs.max()),
        (bwd, DO, dout.abs().max()),
        (bwd, DS, scores.grad.abs().max()),
    ):
        torch.testing.assert_close(meta.amax_history[0, slot].cpu(), expected.float().cpu(), rtol=1e-5, atol=1e-6)
    assert 0.0 < float(fwd.amax_history[0, S]) < 1.0


def test_outside_fp8_autocast_it_is_the_bf16_fused_sdpa(te: Any) -> None:
    layer = te.FusedAttention(scale=0.25, attention_dropout=0.0, enable_recompute=True)
    qkv = _qkv(kv_heads=2)
    mask = torch.zeros(2, 1, 8, 8, device="hpu", dtype=torch.bfloat16)
    out = layer(*qkv, mask, False, "None")
    assert torch.equal(out, _fused_sdpa(*qkv, mask, 0.0, False, 0.25, "None"))
    out.sum().backward()  # the bf16 kernel trains without a causal mask and with recompute
    assert not layer.fp8_meta_tensors_initialized


def test_the_fp8_kernel_on_fp8_inputs(te: Any) -> None:
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


@pytest.mark.parametrize("recompute", [False, True], ids=["kept-probabilities", "recompute"])
def test_the_fp8_kernel_trains_with_the_attention_backward(recompute: bool) -> None:
    from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa

    qkv = _qkv(kv_heads=2)
    outputs = fp8_fused_sdpa(*qkv, None, 0.0, True, None, "None", recompute=recompute)
    # The SDK's outputs in training: (out, m, linv, seed, amax_s, amax_o) recomputing, else (out, amax_s, amax_o).
    assert len(outputs) == (6 if recompute else 3)
    dout = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(3)).to("hpu", torch.bfloat16)
    outputs[0].backward(dout)
    values = [t.detach().float().requires_grad_() for t in qkv]
    _fused_sdpa(*values, None, 0.0, True).backward(dout.float())
    for ours, theirs in zip(qkv, values, strict=True):
        assert ours.grad is not None and theirs.grad is not None
        assert torch.equal(ours.grad, theirs.grad.to(torch.bfloat16))


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


def test_fp8_training_needs_a_causal_mask_as_on_the_sdk(te: Any) -> None:
    layer = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
    with te.fp8_autocast(enabled=True, fp8_recipe=_recipe()):
        with pytest.raises(AssertionError, match="Fp8 FusedSDPA in trining only supports Triangular mask"):
            layer(*_qkv(), None, False)
        # Inference takes any mask.
        with torch.no_grad():
            assert layer(*_qkv(requires_grad=False), None, False).shape == (2, 4, 8, 16)


def test_hybrid_is_refused_on_gaudi2_and_runs_on_gaudi3(te: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from habana_frameworks.torch.hpex.experimental.transformer_engine.module import attention

    layer = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
    with te.fp8_autocast(enabled=True, fp8_recipe=_recipe("HYBRID")):
        with pytest.raises(AssertionError, match="Hybrid mode not supported on Gaudi2 yet"):
            layer(*_qkv(), None, True)
    monkeypatch.setattr(attention, "is_gaudi3", lambda: True)
    qkv = _qkv()
    with te.fp8_autocast(enabled=True, fp8_recipe=_recipe("HYBRID")):
        out = layer(*qkv, None, True)
    out.sum().backward()
    # HYBRID: E4M3 forward casts (Gaudi's e4m3 reaches 240), E5M2 for the output gradient.
    values = [_dequantized(t, torch.ones((), device="hpu"), torch.float8_e4m3fn) for t in qkv]
    assert torch.equal(out, _fused_sdpa(*values, None, 0.0, True).to(torch.bfloat16))


def test_fp8_training_with_recompute_is_refused_as_the_sdk_fails_there(te: Any) -> None:
    layer = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=_recipe()):
        with pytest.raises(ValueError, match=r"enable_recompute=True\) cannot train in fp8"):
            layer(*_qkv(), None, True)
        with torch.no_grad():  # inference takes the recompute kernel on the SDK as well
            assert layer(*_qkv(requires_grad=False), None, True).dtype == torch.bfloat16
