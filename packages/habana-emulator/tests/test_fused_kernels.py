"""The SDK's fused kernels (``hpex.optimizers``, ``hpex.normalization.FusedClipNorm``, ``hpex.kernels.FusedSDPA``).

Each is checked against torch's own implementation on the ``"hpu"`` device (20 training steps of a small model for the
optimizers and the clipping), against the SDK's formula where it differs from torch's (FusedAdamW's ``eps``), and for
the SDK's refusals (gaudi-pytorch-bridge bcc5172, ``hpex/``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.emulator_only

STEPS = 20


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to("hpu")


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(6, 8, generator=generator).to("hpu"), torch.randn(6, 4, generator=generator).to("hpu"))
        for _ in range(STEPS)
    ]


def _train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    clip: Callable[[torch.nn.Module], object] | None = None,
) -> list[torch.Tensor]:
    for x, y in _batches():
        optimizer.zero_grad()
        # A large loss scale, so that clipping at 1.0 cuts in on every step.
        (100 * F.mse_loss(model(x), y)).backward()
        if clip is not None:
            clip(model)
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def _assert_close(ours: list[torch.Tensor], theirs: list[torch.Tensor], atol: float = 1e-5) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-4)


def _moved(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


# --- optimizers -------------------------------------------------------------------------------------------------


def test_fused_adamw_matches_torch_adamw_over_20_steps() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    model = _model()
    start = [p.detach().cpu().clone() for p in model.parameters()]
    reference = copy.deepcopy(model)
    ours = _train(model, FusedAdamW(model.parameters(), lr=1e-2, eps=1e-8, weight_decay=0.1))
    theirs = _train(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2, eps=1e-8, weight_decay=0.1))
    assert _moved(start, ours)
    _assert_close(ours, theirs)


def test_fused_adamw_adds_eps_before_the_bias_correction_as_the_sdk() -> None:
    # FusedAdamW.py:134-150: step size lr * sqrt(1 - b2^t) / (1 - b1^t), eps on the uncorrected sqrt(v), and the
    # weights decayed by 1 - lr * wd first. With a large eps this differs visibly from torch's AdamW.
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0], device="hpu"))
    grad = torch.tensor([0.5, 0.1, -0.3])
    lr, eps, wd, (b1, b2) = 0.1, 0.1, 0.2, (0.9, 0.999)
    optimizer = FusedAdamW([weight], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    weight.grad = grad.to("hpu")
    optimizer.step()
    m, v = (1 - b1) * grad, (1 - b2) * grad * grad
    step = lr * math.sqrt(1 - b2) / (1 - b1)
    expected = torch.tensor([1.0, -2.0, 3.0]) * (1 - lr * wd) - step * m / (v.sqrt() + eps)
    torch.testing.assert_close(weight.detach().cpu(), expected)
    torch_weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    torch_weight.grad = grad.clone()
    torch.optim.AdamW([torch_weight], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd).step()
    assert not torch.allclose(weight.detach().cpu(), torch_weight.detach(), atol=1e-4)


def test_fused_adamw_without_bias_correction() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    weight = torch.nn.Parameter(torch.tensor([1.0], device="hpu"))
    weight.grad = torch.tensor([0.5], device="hpu")
    FusedAdamW([weight], lr=0.1, eps=0.0, bias_correction=False).step()
    # m = 0.05, v = 0.00025: 1 - 0.1 * 0.05 / sqrt(0.00025)
    torch.testing.assert_close(weight.detach().cpu(), torch.tensor([1.0 - 0.1 * 0.05 / math.sqrt(0.00025)]))


@pytest.mark.parametrize(
    "options",
    [
        {"momentum": 0.0},
        {"momentum": 0.9, "weight_decay": 0.01},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.9, "dampening": 0.1},
    ],
    ids=["plain", "momentum-wd", "nesterov", "dampening"],
)
def test_fused_sgd_matches_torch_sgd(options: dict[str, float]) -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedSGD

    model = _model()
    reference = copy.deepcopy(model)
    _assert_close(
        _train(model, FusedSGD(model.parameters(), lr=1e-3, **options)),
        _train(reference, torch.optim.SGD(reference.parameters(), lr=1e-3, **options)),
    )


def test_fused_adagrad_matches_torch_adagrad() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedAdagrad

    options = {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1}
    model = _model()
    reference = copy.deepcopy(model)
    _assert_close(
        _train(model, FusedAdagrad(model.parameters(), **options)),
        _train(reference, torch.optim.Adagrad(reference.parameters(), **options)),
    )


def test_fused_adagrad_keeps_the_constructors_learning_rate_as_the_sdk() -> None:
    # FusedAdagrad.py:49: the kernel's lr is a tensor made at construction; group["lr"] is not read again.
    from habana_frameworks.torch.hpex.optimizers import FusedAdagrad

    model = _model()
    reference = copy.deepcopy(model)
    optimizer = FusedAdagrad(model.parameters(), lr=0.05)
    optimizer.param_groups[0]["lr"] = 100.0
    _assert_close(_train(model, optimizer), _train(reference, torch.optim.Adagrad(reference.parameters(), lr=0.05)))


def test_fused_lamb_without_decay_or_clipping_is_adam() -> None:
    # With weight_decay=0 and use_lamb off the trust ratio is 1, and without max_grad_norm nothing is clipped: the
    # update is Adam's (eps after the bias correction, as torch's Adam).
    from habana_frameworks.torch.hpex.optimizers import FusedLamb

    model = _model()
    reference = copy.deepcopy(model)
    ours = _train(model, FusedLamb(model.parameters(), lr=1e-2, eps=1e-8, weight_decay=0.0, max_grad_norm=None))
    _assert_close(ours, _train(reference, torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-8)))


def test_fused_lamb_scales_each_update_by_the_trust_ratio() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedLamb

    weight = torch.nn.Parameter(torch.tensor([3.0, 4.0], device="hpu"))
    grad = torch.tensor([0.3, -0.4])
    weight.grad = grad.to("hpu")
    lr, wd = 0.1, 0.5
    FusedLamb([weight], lr=lr, eps=0.0, weight_decay=wd, max_grad_norm=None).step()
    update = grad.sign() + wd * torch.tensor([3.0, 4.0])  # m_hat / sqrt(v_hat) is sign(g) on the first step
    ratio = torch.tensor([3.0, 4.0]).norm() / update.norm()
    torch.testing.assert_close(weight.detach().cpu(), torch.tensor([3.0, 4.0]) - lr * ratio * update)


def test_fused_lamb_clips_the_global_gradient_norm_first() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedLamb

    weights = [torch.nn.Parameter(torch.zeros(2, device="hpu")) for _ in range(2)]
    for weight in weights:
        weight.grad = torch.tensor([30.0, 40.0], device="hpu")
    optimizer = FusedLamb(weights, lr=0.1, eps=0.0, weight_decay=0.0, max_grad_norm=1.0)
    optimizer.step()
    # The first moment holds (1 - b1) * g / (|g| / max_grad_norm).
    norm = math.sqrt(2) * 50.0
    torch.testing.assert_close(optimizer.state[weights[0]]["exp_avg"].cpu(), 0.1 * torch.tensor([30.0, 40.0]) / norm)


# --- FusedClipNorm -----------------------------------------------------------------------------------------------


def test_fused_clip_norm_matches_clip_grad_norm_over_20_steps() -> None:
    from habana_frameworks.torch.hpex.normalization import FusedClipNorm

    model = _model()
    start = [p.detach().cpu().clone() for p in model.parameters()]
    reference = copy.deepcopy(model)
    clipper = FusedClipNorm(model.parameters(), max_norm=1.0)
    fused_norms: list[float] = []
    plain_norms: list[float] = []
    ours = _train(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        lambda m: fused_norms.append(float(clipper.clip_norm(m.parameters()))),
    )
    theirs = _train(
        reference,
        torch.optim.SGD(reference.parameters(), lr=0.05),
        lambda m: plain_norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0))),
    )
    assert _moved(start, ours)
    _assert_close(ours, theirs)
    assert all(n > 1.0 for n in plain_norms), "the clipping never cut in: the test checks nothing"
    assert fused_norms == pytest.approx(plain_norms, rel=1e-5)


def test_fused_clip_norm_leaves_small_gradients_and_returns_the_norm() -> None:
    from habana_frameworks.torch.hpex.normalization import FusedClipNorm

    weight = torch.nn.Parameter(torch.zeros(2, device="hpu"))
    weight.grad = torch.tensor([0.3, 0.4], device="hpu")
    norm = FusedClipNorm([weight], max_norm=1.0).clip_norm(weight)
    assert norm.shape == (1,) and float(norm) == pytest.approx(0.5)
    torch.testing.assert_close(weight.grad.cpu(), torch.tensor([0.3, 0.4]))
    weight.grad = None
    assert float(FusedClipNorm([weight], max_norm=1.0).clip_norm([weight])) == 0.0


# --- FusedSDPA ---------------------------------------------------------------------------------------------------


def _qkv(heads_kv: int = 4, dtype: torch.dtype = torch.float32) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(2)
    for heads in (4, heads_kv, heads_kv):
        yield torch.randn(2, heads, 6, 8, generator=generator, dtype=dtype).to("hpu").requires_grad_()


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "bool-mask": {"mask": "bool"},
    "float-mask": {"mask": "float"},
    "scale": {"scale": 0.3},
    "causal-scale": {"is_causal": True, "scale": 0.5},
}


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "no-recompute"])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_sdpa_matches_torch_sdpa_forward_and_backward(case: str, recompute: bool) -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    options = CASES[case]
    is_causal = bool(options.get("is_causal", False))
    scale = options.get("scale")
    mask = None
    generator = torch.Generator().manual_seed(3)
    if options.get("mask") == "bool":
        mask = (torch.rand(2, 1, 6, 6, generator=generator) > 0.3).to("hpu")
        mask[..., 0] = True  # no row fully masked (torch's SDPA gives NaN there)
    elif options.get("mask") == "float":
        mask = torch.randn(2, 1, 6, 6, generator=generator).to("hpu")
    q, k, v = _qkv()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = FusedSDPA.apply(q, k, v, mask, 0.0, is_causal, scale, "None", recompute)
    expected = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=mask, is_causal=is_causal, scale=scale)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    for ours, theirs in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("heads_kv", [2, 1], ids=["grouped", "multi-query"])
def test_fused_sdpa_grouped_query_attention(heads_kv: int) -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv(heads_kv)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = FusedSDPA.apply(q, k, v, None, 0.0, True)
    expected = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    out.sum().backward()
    expected.sum().backward()
    for ours, theirs in ((q, q2), (k, k2), (v, v2)):
        assert ours.grad.shape == ours.shape
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4)


def test_fused_sdpa_in_bf16_is_within_bf16_rounding_of_torch() -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv(dtype=torch.bfloat16)
    out = FusedSDPA.apply(q, k, v, None, 0.0, True)
    assert out.dtype == torch.bfloat16
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "no-recompute"])
def test_fused_sdpa_dropout_backward_uses_the_forwards_mask(recompute: bool) -> None:
    # With dropout the gradient of v is P_dropped^T @ dout: check it against the output of the same forward.
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv()
    out = FusedSDPA.apply(q, k, v, None, 0.5, False, None, "None", recompute)
    # dout = identity columns: out = P_dropped @ v is linear in v, so v.grad from sum(out * dout) equals
    # P_dropped^T @ dout; check that through a second linear probe: d(out)/d(v) applied to v equals out.
    (out * out.detach()).sum().backward()
    assert v.grad is not None
    torch.testing.assert_close((v.grad * v.detach()).sum(), (out.detach() * out.detach()).sum(), atol=1e-4, rtol=1e-4)


def test_fused_sdpa_inference_returns_the_attention_probabilities() -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = (t.detach() for t in _qkv())
    out, probs = FusedSDPA.apply(q, k, v, None, 0.0, True, None, "None", None, None, "left", False, True)
    torch.testing.assert_close(probs @ v, out)
    assert torch.all(probs.triu(1) == 0)


# --- refusals ----------------------------------------------------------------------------------------------------


def test_fused_sdpa_refuses_the_sdks_unsupported_combinations() -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv()
    with pytest.raises(AssertionError, match="only in causal"):
        FusedSDPA.apply(q, k, v, None, 0.0, False, None, "fast", True)
    with pytest.raises(AssertionError, match="only for inference"):
        FusedSDPA.apply(q, k, v, None, 0.0, True, None, "None", None, None, "left", False, True)
    with pytest.raises(AssertionError, match="not supported in recompute"):
        FusedSDPA.apply(q, k, v, None, 0.1, True, None, "None", True, None, "left", True)
    # fast softmax with causal attention in recompute training is the SDK's supported case
    FusedSDPA.apply(q, k, v, None, 0.0, True, None, "fast", True).sum().backward()


# The emulated SDK runs on Gaudi 2 and 3 only (a first-generation Gaudi is refused when the SDK loads,
# test_sdk_1_24_names.py), so FusedSDPA has no generation to refuse.


def test_fused_sdpa_without_a_recompute_mode_follows_the_sdp_kernel_switch() -> None:
    # The recompute variant refuses to return a dropout mask: which variant ran shows in that refusal.
    import habana_frameworks.torch.hpu as hpu
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv()
    with pytest.raises(AssertionError, match="not supported in recompute"):
        FusedSDPA.apply(q, k, v, None, 0.1, True, None, "None", None, None, "left", True)
    with hpu.sdp_kernel(enable_recompute=False):
        out, mask = FusedSDPA.apply(q, k, v, None, 0.1, True, None, "None", None, None, "left", True)
    assert out.shape == q.shape and mask.shape == (2, 4, 6, 6)
    # In inference one query row takes the recompute variant whatever was asked (bcc5172 FusedSDPA.py).
    q1, k1, v1 = (t.detach() for t in _qkv())
    with pytest.raises(AssertionError, match="not supported in recompute"):
        FusedSDPA.apply(q1[:, :, :1], k1, v1, None, 0.1, False, None, "None", False, None, "left", True)


def test_fused_sdpa_takes_a_2d_mask_and_fp32_softmax_for_bf16_and_gives_an_empty_inference_output() -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = (t.detach() for t in _qkv())
    mask = (torch.rand(6, 6, generator=torch.Generator().manual_seed(4)) > 0.3).to("hpu")
    mask[:, 0] = True
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(FusedSDPA.apply(q, k, v, mask), expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(AssertionError, match=r"unsupported 2D attention mask, the shape is not \(Nt, Ns\)"):
        FusedSDPA.apply(q, k, v, mask[:5])
    with pytest.raises(AssertionError, match="softmax_mode = fp32 is supported only when q/k/v inputs are BF16"):
        FusedSDPA.apply(q, k, v, None, 0.0, True, None, "fp32")
    bf16 = [t.to(torch.bfloat16) for t in (q, k, v)]
    torch.testing.assert_close(
        FusedSDPA.apply(*bf16, None, 0.0, True, None, "fp32").float(),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        atol=2e-2,
        rtol=2e-2,
    )
    empty = FusedSDPA.apply(q[:0], k[:0], v[:0, :, :, :5])
    assert empty.shape == (0, 4, 6, 5)


def test_fused_sdpa_refuses_a_window_or_sinks_by_name() -> None:
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv()
    args = (None, 0.0, True, None, "None", True, None, "left", False, False)
    with pytest.raises(NotImplementedError, match=r"FusedSDPA with window_size=\(4, 0\) is not emulated"):
        FusedSDPA.apply(q, k, v, *args, (4, 0))
    with pytest.raises(NotImplementedError, match=r"FusedSDPA with sink=<a tensor> is not emulated"):
        FusedSDPA.apply(q, k, v, *args, (-1, -1), torch.zeros(4, device="hpu"))
    # Their defaults, given explicitly, are the plain kernel; a backward returns a gradient per input.
    FusedSDPA.apply(q, k, v, *args, (-1, -1), None).sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape


def test_fused_optimizers_refuse_as_the_sdk() -> None:
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW, FusedLamb, FusedSGD

    params = [torch.nn.Parameter(torch.zeros(2, device="hpu"))]
    with pytest.raises(ValueError, match=r"Invalid beta parameter: 1[.]0"):
        FusedAdamW(params, betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        FusedSGD(params, lr=0.1, nesterov=True)
    with pytest.raises(RuntimeError, match="does not support the AMSGrad"):
        FusedLamb(params, amsgrad=True)
    params[0].grad = torch.ones(2, device="hpu")
    with pytest.raises(NotImplementedError, match=r"moments_dtype=torch.float8_e4m3fn.*not emulated"):
        FusedAdamW(params, moments_dtype=torch.float8_e4m3fn).step()


def test_the_not_emulated_hpex_names_refuse_by_name() -> None:
    import importlib

    from habana_frameworks.torch.hpex import kernels, normalization, optimizers

    from lightning_accel.habana_emulator._not_emulated import NotEmulatedError, NotEmulatedModuleError

    for module, name in ((optimizers, "FusedLars"), (normalization, "FusedRMSNorm"), (kernels, "CTCLoss")):
        sdk_name = "habana_frameworks.torch.hpex." + module.__name__.rpartition(".")[2]
        with pytest.raises(NotEmulatedError, match=rf"{sdk_name}[.]{name} is not emulated"):
            getattr(module, name)()
    with pytest.raises(NotEmulatedModuleError, match=r"hpex[.]optimizers[.]MarkstepAdamW is not emulated"):
        importlib.import_module("habana_frameworks.torch.hpex.optimizers.MarkstepAdamW")


def test_the_packages_keep_their_classes_after_the_submodule_is_imported() -> None:
    import importlib

    import habana_frameworks.torch.hpex.optimizers as optimizers

    importlib.import_module("habana_frameworks.torch.hpex.optimizers.FusedAdamW")
    assert isinstance(optimizers.FusedAdamW, type)
