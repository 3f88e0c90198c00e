"""Gaudi's fused kernels in Lightning: fused optimizers, fused gradient clipping and fused attention.

The SDK ships them in ``habana_frameworks.torch.hpex`` (gaudi-pytorch-bridge 1.19.0); optimum-habana turns them on
with ``use_fused_adam``, ``use_fused_clip_norm`` and ``use_flash_attention`` / ``gaudi_fused_sdpa``. Here:

* :func:`fused_optimizer` / :func:`fused_adamw`: the SDK's ``FusedAdamW`` (and ``FusedSGD``, ``FusedAdagrad``,
  ``FusedLamb``), to return from ``configure_optimizers``;
* ``HPUPrecisionPlugin(..., fused_clip_norm=True)``: ``Trainer(gradient_clip_val=..., gradient_clip_algorithm="norm")``
  clips through the SDK's ``FusedClipNorm``; :func:`fused_clip_grad_norm_` is the same for Fabric and plain loops;
* :func:`use_fused_sdpa`: a model's ``torch.nn.functional.scaled_dot_product_attention`` calls (transformers' SDPA
  attention makes them) run the SDK's ``FusedSDPA`` kernel, with its recompute and causal options.

Each refuses, naming the argument, where the SDK lacks the feature (an optimizer the SDK does not fuse, value
clipping, a softmax mode FusedSDPA lacks). All SDK access goes through :mod:`lightning_accel.habana.sdk`.

Example:
    >>> import torch
    >>> from lightning.pytorch import LightningModule
    >>> from lightning_accel.habana.fused import fused_adamw, use_fused_sdpa
    >>> class Model(LightningModule):
    ...     def configure_optimizers(self):
    ...         return fused_adamw(self.parameters(), lr=1e-3, weight_decay=0.01)
    >>> handle = use_fused_sdpa(model, recompute=True, causal=True)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "FUSED_OPTIMIZERS",
    "FusedSDPAHandle",
    "fused_adamw",
    "fused_clip_grad_norm_",
    "fused_optimizer",
    "fused_sdpa",
    "routed_through",
    "use_fused_sdpa",
]

#: The name :func:`fused_optimizer` takes -> the SDK's class in ``hpex.optimizers``.
FUSED_OPTIMIZERS: dict[str, str] = {
    "adamw": "FusedAdamW",
    "sgd": "FusedSGD",
    "adagrad": "FusedAdagrad",
    "lamb": "FusedLamb",
}
_SOFTMAX_MODES = ("None", "fast")


def fused_optimizer(name: str, params: Any, **kwargs: Any) -> torch.optim.Optimizer:
    """The SDK's fused optimizer ``name`` over ``params`` (``kwargs`` are the SDK class's arguments).

    Args:
        name: ``"adamw"``, ``"sgd"``, ``"adagrad"`` or ``"lamb"`` (any case).
        params: The parameters or parameter groups, as for any torch optimizer.
        **kwargs: The SDK class's arguments (``lr``, ``weight_decay``, ...).

    Raises:
        ConfigurationError: For a name the SDK has no fused optimizer for.

    Example:
        >>> import torch
        >>> from lightning_accel.habana.fused import fused_optimizer
        >>> model = torch.nn.Linear(4, 2).to("hpu")  # doctest: +SKIP
        >>> optimizer = fused_optimizer("sgd", model.parameters(), lr=0.1, momentum=0.9)  # doctest: +SKIP
    """
    key = name.lower() if isinstance(name, str) else name
    if key not in FUSED_OPTIMIZERS:
        accepted = ", ".join(repr(n) for n in FUSED_OPTIMIZERS)
        raise ConfigurationError(
            f"fused_optimizer(name={name!r}): the Gaudi SDK has no such fused optimizer here. Accepted: {accepted} "
            "(hpex.optimizers.FusedAdamW, FusedSGD, FusedAdagrad, FusedLamb). For another optimizer return a "
            "torch.optim optimizer from configure_optimizers."
        )
    cls = getattr(sdk.fused_optimizers_module(), FUSED_OPTIMIZERS[key])
    optimizer: torch.optim.Optimizer = cls(params, **kwargs)
    return optimizer


def fused_adamw(
    params: Any,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    bias_correction: bool = True,
) -> torch.optim.Optimizer:
    """The SDK's ``FusedAdamW``: AdamW with one fused kernel per parameter group (optimum-habana's ``use_fused_adam``).

    The SDK's defaults, not torch's: ``eps=1e-6``, and ``eps`` is added to ``sqrt(v)`` before the bias correction
    (folded into the step size), so it weighs less than torch's ``eps`` in the first steps.

    Args:
        params: The parameters or parameter groups.
        lr: The learning rate.
        betas: The decay rates of the moments.
        eps: Added to ``sqrt(exp_avg_sq)``.
        weight_decay: Decoupled weight decay (``w *= 1 - lr * weight_decay``).
        bias_correction: Correct the moments' bias.

    Example:
        >>> from lightning.pytorch import LightningModule
        >>> from lightning_accel.habana.fused import fused_adamw
        >>> class Model(LightningModule):
        ...     def configure_optimizers(self):
        ...         return fused_adamw(self.parameters(), lr=1e-3, weight_decay=0.01)
    """
    return fused_optimizer(
        "adamw", params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction
    )


def fused_clip_grad_norm_(parameters: torch.Tensor | Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip the gradients of ``parameters`` to total L2 norm ``max_norm`` with the SDK's ``FusedClipNorm``.

    The fused counterpart of ``torch.nn.utils.clip_grad_norm_(parameters, max_norm)`` (L2 only: the SDK's kernel has
    no other norm type), for Fabric and hand-written loops.

    Returns:
        The total norm before clipping.

    Example:
        >>> from lightning_accel.habana.fused import fused_clip_grad_norm_
        >>> norm = fused_clip_grad_norm_(model.parameters(), max_norm=1.0)  # doctest: +SKIP
    """
    import torch

    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    clipper = sdk.fused_normalization_module().FusedClipNorm(params, max_norm)
    norm: torch.Tensor = clipper.clip_norm(params)
    return norm


#: The SDK's FusedSDPA (an autograd.Function), found by the check that precedes every use of it.
_fused_sdpa_kernel: Any = None


def _check_sdpa_options(recompute: bool | None, causal: bool, softmax_mode: str) -> None:
    if softmax_mode not in _SOFTMAX_MODES:
        raise ConfigurationError(
            f"softmax_mode={softmax_mode!r} is not a mode of the SDK's FusedSDPA. Accepted: 'None' (exact softmax) or "
            "'fast' (Gaudi's faster bf16 softmax, in training only with causal attention and recompute)."
        )
    if recompute is not None and not isinstance(recompute, bool):
        raise ConfigurationError(f"recompute={recompute!r} is not a bool. Accepted: True, False or None.")
    if not isinstance(causal, bool):
        raise ConfigurationError(f"causal={causal!r} is not a bool. Accepted: True or False.")
    _find_fused_sdpa()


# Under torch.compile this runs once, on the host while Dynamo traces, and leaves nothing in the graph: the SDK's
# lookups are not traceable, and need not be.
@torch.compiler.assume_constant_result
def _find_fused_sdpa() -> None:
    global _fused_sdpa_kernel
    _fused_sdpa_kernel = sdk.fused_kernels_module().FusedSDPA


def fused_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    recompute: bool | None = True,
    softmax_mode: str = "None",
) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention``'s arguments, computed by the SDK's ``FusedSDPA``.

    Args:
        query: ``[batch, heads, length, dim]``; keys and values may have fewer heads (grouped-query attention).
        key: The keys.
        value: The values.
        attn_mask: A boolean mask (``True`` keeps) or an additive float mask, broadcastable to the scores.
        dropout_p: Dropout probability on the attention weights.
        is_causal: Causal (lower-triangular) attention.
        scale: The scores' scale; ``1 / sqrt(dim)`` when omitted.
        recompute: Recompute the attention weights in backward instead of keeping them (less memory); ``None``
            follows the SDK's process-wide switch (on by default).
        softmax_mode: ``"None"`` or ``"fast"``.

    Raises:
        ConfigurationError: For a ``softmax_mode`` the SDK lacks, or ``"fast"`` in recompute training without
            causal attention.

    Example:
        >>> from lightning_accel.habana.fused import fused_sdpa
        >>> out = fused_sdpa(q, k, v, is_causal=True, recompute=False)  # doctest: +SKIP
    """
    _check_sdpa_options(recompute, is_causal, softmax_mode)
    return _apply(query, key, value, attn_mask, dropout_p, is_causal, scale, recompute, softmax_mode)


def _apply(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    recompute: bool | None,
    softmax_mode: str,
) -> torch.Tensor:
    training = query.requires_grad or key.requires_grad or value.requires_grad
    if softmax_mode == "fast" and recompute is not False and training and not is_causal:
        raise ConfigurationError(
            "softmax_mode='fast' on a non-causal attention call in training: the SDK's FusedSDPA supports the fast "
            "softmax in recompute training only with causal attention (FusedSDPA.py:117-120). Accepted: causal=True, "
            "recompute=False, or softmax_mode='None'."
        )
    kernel = _fused_sdpa_kernel
    out: torch.Tensor = kernel.apply(query, key, value, attn_mask, dropout_p, is_causal, scale, softmax_mode, recompute)
    return out


#: Who computes the fused attention calls instead of the kernel alone (innermost last): context parallelism, which
#: attends over its group's gathered keys and values, with the kernel it is given. A module global, not a thread's:
#: torch.compile guards on it as on any global, and a step's attention runs on the thread that runs the step.
_routes: list[Callable[..., torch.Tensor]] = []


@contextmanager
def routed_through(route: Callable[..., torch.Tensor]) -> Iterator[None]:
    """While the block runs, :func:`use_fused_sdpa`'s calls go to ``route`` with their kernel.

    ``route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel=...)`` computes the
    attention; ``kernel`` takes the first seven and runs the SDK's FusedSDPA with the handle's recompute and softmax
    options.
    """
    _routes.append(route)
    try:
        yield
    finally:
        _routes.remove(route)


class FusedSDPAHandle:
    """What :func:`use_fused_sdpa` returns: ``remove()`` (or leaving its ``with`` block) restores torch's SDPA.

    Example:
        >>> from lightning_accel.habana.fused import use_fused_sdpa
        >>> with use_fused_sdpa(model, causal=True):  # doctest: +SKIP
        ...     trainer.fit(model)
    """

    def __init__(self, module: torch.nn.Module, replacement: Callable[..., torch.Tensor]) -> None:
        import sys

        import torch.nn.functional as F

        self._original = F.scaled_dot_product_attention
        self._replacement = replacement
        self._depth = 0
        # Modules that bound the function under its own name (``from torch.nn.functional import
        # scaled_dot_product_attention``) call it through their globals: swap it there too, not only in F.
        self._namespaces: list[dict[str, Any]] = [vars(F)]
        for child in module.modules():
            namespace = vars(sys.modules.get(type(child).__module__, F))
            if namespace.get("scaled_dot_product_attention") is self._original and namespace not in self._namespaces:
                self._namespaces.append(namespace)
        self._hooks = [
            module.register_forward_pre_hook(self._enter),
            module.register_forward_hook(self._exit, always_call=True),
        ]

    def _enter(self, *args: Any) -> None:
        self._depth += 1
        if self._depth == 1:
            for namespace in self._namespaces:
                namespace["scaled_dot_product_attention"] = self._replacement

    def _exit(self, *args: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._restore()

    def _restore(self) -> None:
        for namespace in self._namespaces:
            namespace["scaled_dot_product_attention"] = self._original

    def remove(self) -> None:
        """Stop using the fused kernel in this model's forward."""
        for hook in self._hooks:
            hook.remove()
        self._depth = 0
        self._restore()

    def __enter__(self) -> FusedSDPAHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def use_fused_sdpa(
    module: torch.nn.Module,
    *,
    recompute: bool | None = True,
    causal: bool = False,
    softmax_mode: str = "None",
) -> FusedSDPAHandle:
    """Run ``module``'s ``scaled_dot_product_attention`` calls on the SDK's ``FusedSDPA`` (during its forward).

    Inside ``module``'s forward, ``torch.nn.functional.scaled_dot_product_attention`` (what transformers' ``"sdpa"``
    attention and most hand-written attention layers call) is the fused kernel; outside it, and for tensors not on
    an HPU, it is torch's. Apply it to the module whose forward the training step calls (``self.model`` of a
    LightningModule wrapping a transformers model). Under ``torch.compile`` (``HPUCompile``, or
    ``torch.compile(model, backend="hpu_backend")``) the fused kernel is traced into the model's graph, as
    optimum-habana's compiled models hold ``FusedSDPA``.

    Args:
        module: The model.
        recompute: Recompute the attention weights in backward (less memory, optimum-habana's
            ``flash_attention_recompute``); ``None`` follows the SDK's process-wide switch.
        causal: ``False``: each call's own ``is_causal`` and mask. ``True``: every call is causal and its mask is
            dropped (optimum-habana's ``flash_attention_causal_mask``: only for batches without padding, where the
            mask is the causal mask; the kernel then needs no mask tensor).
        softmax_mode: ``"None"`` or ``"fast"`` (Gaudi's bf16 softmax; in training only with causal attention).

    Returns:
        A handle; ``remove()`` (or its ``with`` block) restores torch's SDPA for the model.

    Raises:
        ConfigurationError: For an option the SDK's FusedSDPA lacks (each named with what is accepted).

    Example:
        >>> from lightning_accel.habana.fused import use_fused_sdpa
        >>> handle = use_fused_sdpa(model.model, recompute=True, causal=True)  # doctest: +SKIP
        >>> trainer.fit(model)  # doctest: +SKIP
        >>> handle.remove()  # doctest: +SKIP
    """
    _check_sdpa_options(recompute, causal, softmax_mode)
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def scaled_dot_product_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if query.device.type != sdk.DEVICE_TYPE:
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        # FusedSDPA groups query heads by key heads itself: enable_gqa needs nothing more.
        if causal:
            is_causal, attn_mask = True, None
        if _routes:
            kernel = partial(_apply, recompute=recompute, softmax_mode=softmax_mode)
            return _routes[-1](query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, kernel=kernel)
        return _apply(query, key, value, attn_mask, dropout_p, is_causal, scale, recompute, softmax_mode)

    return FusedSDPAHandle(module, scaled_dot_product_attention)
