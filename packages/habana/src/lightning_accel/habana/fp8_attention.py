"""Attention in fp8 on the SDK's ``transformer_engine.FusedAttention``: optimum-habana's ``flash_attention_fp8``.

optimum-habana gives each attention layer of a causal LM a ``ModuleFusedSDPA`` of its own, and under fp8 swaps it for
a ``TE_ModuleFusedSDPA`` holding the SDK's ``FusedAttention(scale, attention_dropout, enable_recompute)``
(``optimum/habana/accelerate/utils/transformer_engine.py``). Each layer needs its own: the layer keeps the fp8 scaling
state (amax histories and scales of q, k, v, S, dO and dS) that delayed scaling updates, and saves it in the
``state_dict``. A patched ``torch.nn.functional.scaled_dot_product_attention`` cannot tell which layer calls it, so
:func:`use_fp8_fused_attention` goes through transformers' own extension point instead: it attaches a
``FusedAttention`` to every attention layer (there before a checkpoint loads) and registers an attention function
(``transformers.AttentionInterface``) that the model's layers call with themselves as first argument.

Inside the precision plugin's ``fp8_autocast`` (``precision="fp8"``) the layers run the SDK's fp8 attention kernel;
outside it, the SDK runs ``FusedSDPA`` in bf16, which a training step refuses here, since it would train without fp8
attention without a word. The SDK trains fp8 attention only causally and without recompute, so every call is causal
and its padding mask is dropped, as optimum-habana's ``flash_attention_causal_mask`` does (a warning says so the first
time a mask arrives).

Example:
    >>> from lightning.pytorch import Trainer
    >>> from lightning_accel.habana import HPUPrecisionPlugin
    >>> from lightning_accel.habana.fp8_attention import use_fp8_fused_attention
    >>> fp8 = HPUPrecisionPlugin("fp8")  # doctest: +SKIP
    >>> fp8.convert_modules(model, replace_layers=True)  # doctest: +SKIP
    >>> handle = use_fp8_fused_attention(model)  # doctest: +SKIP
    >>> Trainer(accelerator="hpu", devices=1, plugins=[fp8]).fit(module)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = ["ATTENTION_NAME", "FP8AttentionHandle", "use_fp8_fused_attention"]

#: The name of the attention function in transformers' ``AttentionInterface`` (``config._attn_implementation``).
ATTENTION_NAME = "lightning_accel_fp8_fused_sdpa"
#: The submodule each attention layer gets: the SDK's ``FusedAttention``, whose fp8 state is in the ``state_dict``.
LAYER_NAME = "fp8_fused_attention"
_SOFTMAX_MODES = ("None", "fast")


class FP8AttentionHandle:
    """What :func:`use_fp8_fused_attention` returns: the layers it attached and what ran through them.

    Attributes:
        layers: The attention layers, each holding a ``FusedAttention`` as ``fp8_fused_attention``.
        fp8_calls: Attention calls that ran in fp8 (inside ``fp8_autocast``).
        other_calls: Attention calls outside ``fp8_autocast`` (evaluation outside the precision plugin), which the
            SDK runs on its bf16 ``FusedSDPA``.

    Example:
        >>> from lightning_accel.habana.fp8_attention import use_fp8_fused_attention
        >>> with use_fp8_fused_attention(model) as handle:  # doctest: +SKIP
        ...     trainer.fit(module)
        >>> handle.fp8_calls > 0  # doctest: +SKIP
        True
    """

    def __init__(self, model: torch.nn.Module, layers: list[torch.nn.Module], previous: Any, softmax_mode: str) -> None:
        self.model = model
        self.layers = layers
        self.softmax_mode = softmax_mode
        self.fp8_calls = 0
        self.other_calls = 0
        self.masks_dropped = 0
        self._previous = previous

    def remove(self) -> None:
        """Give the model back its previous attention and drop the ``FusedAttention`` layers (and their fp8 state)."""
        for layer in self.layers:
            if getattr(layer, _HANDLE, None) is self:
                delattr(layer, LAYER_NAME)
                delattr(layer, _HANDLE)
        self.model.set_attn_implementation(self._previous)  # type: ignore[operator]
        self.layers = []

    def __enter__(self) -> FP8AttentionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


# Kept on each layer as a plain attribute (not a submodule, not in the state_dict): the attention function finds its
# handle through the layer it is called with.
_HANDLE = "_lightning_accel_fp8_attention"


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ConfigurationError(
            "use_fp8_fused_attention(model) works on transformers models, and transformers is not installed. "
            "Install it (pip install transformers)."
        ) from exc
    if not hasattr(transformers, "AttentionInterface"):
        raise ConfigurationError(
            f"use_fp8_fused_attention(model): transformers {transformers.__version__} has no AttentionInterface, "
            "through which the model's attention layers reach their FusedAttention. Upgrade transformers to a release "
            "with AttentionInterface and PreTrainedModel.set_attn_implementation."
        )
    return transformers


def _register_with_transformers(transformers: Any) -> None:
    if ATTENTION_NAME in transformers.AttentionInterface._global_mapping:
        return
    transformers.AttentionInterface.register(ATTENTION_NAME, _attention)
    # With a mask function of its own the model builds SDPA's mask: None when no sample is padded, so that a mask
    # reaching the attention function means padding, which is then dropped with a warning rather than silently.
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _attention_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    # transformers' attention layers carry is_causal (and call the AttentionInterface with themselves).
    layers = [m for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool) and hasattr(m, "config")]
    name = type(model).__name__
    if not layers:
        raise ConfigurationError(
            f"use_fp8_fused_attention(model={name}): found no attention layer (a transformers module with an "
            "is_causal attribute). Accepted: a transformers causal LM (Llama, Qwen2, Mistral, GPT-2, ...)."
        )
    encoders = sorted({type(m).__name__ for m in layers if not m.is_causal})
    if encoders:
        raise ConfigurationError(
            f"use_fp8_fused_attention(model={name}): {', '.join(encoders)} attend without a causal mask, and the "
            "SDK's fp8 attention trains causal attention only (transformer_engine FusedAttention, as optimum-habana's "
            "flash_attention_fp8 on causal LMs). Accepted: a causal LM; for this model use use_fused_sdpa (bf16)."
        )
    return layers


def use_fp8_fused_attention(model: torch.nn.Module, *, softmax_mode: str = "None") -> FP8AttentionHandle:
    """Give each attention layer of ``model`` the SDK's ``FusedAttention`` and route its attention through it.

    Call it on the transformers model after ``HPUPrecisionPlugin("fp8").convert_modules(model, replace_layers=True)``
    (or let ``OptimumImport.prepare_model`` do both) and before a checkpoint loads: the layers' fp8 scaling state is
    part of the ``state_dict``. Then train with ``precision="fp8"``.

    Args:
        model: A transformers causal LM (its attention layers call ``transformers.AttentionInterface``).
        softmax_mode: ``"None"`` (exact softmax) or ``"fast"`` (optimum-habana's ``flash_attention_fast_softmax``).

    Returns:
        A handle with the attached layers and counts of the calls; ``remove()`` undoes it.

    Raises:
        ConfigurationError: For a model that is not a transformers model routing attention through
            ``AttentionInterface``, one with non-causal attention, a model given twice, or a bad ``softmax_mode``.

    Example:
        >>> from lightning_accel.habana.fp8_attention import use_fp8_fused_attention
        >>> handle = use_fp8_fused_attention(model, softmax_mode="fast")  # doctest: +SKIP
    """
    if softmax_mode not in _SOFTMAX_MODES:
        raise ConfigurationError(
            f"use_fp8_fused_attention(softmax_mode={softmax_mode!r}): accepted: 'None' (exact softmax) or 'fast'."
        )
    transformers = _transformers()
    name = type(model).__name__
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if not isinstance(model, transformers.PreTrainedModel) or can_set is None or not can_set():
        raise ConfigurationError(
            f"use_fp8_fused_attention(model={name}): accepted: a transformers PreTrainedModel whose attention goes "
            "through transformers.AttentionInterface (its attn_implementation can be set). Pass the transformers "
            "model (e.g. self.model of your LightningModule)."
        )
    layers = _attention_layers(model)
    if any(hasattr(layer, LAYER_NAME) for layer in layers):
        raise ConfigurationError(
            f"use_fp8_fused_attention(model={name}): the model's attention layers already have a {LAYER_NAME}. Apply "
            "it once per model (call remove() on the first handle to start again)."
        )
    _register_with_transformers(transformers)
    te = sdk.transformer_engine_module()
    previous = model.config._attn_implementation
    handle = FP8AttentionHandle(model, layers, previous, softmax_mode)
    for layer in layers:
        # The scale and dropout are the call's (transformers passes them); the SDK trains fp8 without recompute.
        fused = te.FusedAttention(scale=None, attention_dropout=0.0, enable_recompute=False)
        fused.train(layer.training)
        layer.add_module(LAYER_NAME, fused)
        object.__setattr__(layer, _HANDLE, handle)
    model.set_attn_implementation(ATTENTION_NAME)
    return handle


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The attention function transformers calls: ``[batch, heads, length, dim]`` in, ``[batch, length, ...]`` out."""
    handle: FP8AttentionHandle | None = getattr(module, _HANDLE, None)
    fused = getattr(module, LAYER_NAME, None)
    if handle is None or fused is None:
        raise ConfigurationError(
            f"{type(module).__name__} runs attention_implementation={ATTENTION_NAME!r} without a FusedAttention of its "
            "own: call use_fp8_fused_attention(model) on the whole model instead of setting the implementation by "
            "name."
        )
    q_length, kv_length = query.shape[2], key.shape[2]
    if q_length > 1 and q_length != kv_length:
        raise ConfigurationError(
            f"{type(module).__name__}: fp8 fused attention of {q_length} queries over {kv_length} cached keys: the "
            "causal fp8 kernel aligns queries and keys at their start, so a prompt continued from a cache would see "
            "the wrong keys. Generate with use_cache=False, or remove() the fp8 attention for generation."
        )
    if attention_mask is not None:
        if handle.masks_dropped == 0:
            warnings.warn(
                "fp8 fused attention dropped an attention mask: the SDK's fp8 attention trains causal attention "
                "without a padding mask (optimum-habana's flash_attention_causal_mask), so padded tokens are attended "
                "to. Pack or truncate sequences so that batches have no padding.",
                stacklevel=2,
            )
        handle.masks_dropped += 1
    in_fp8 = bool(sdk.transformer_engine_module().fp8.FP8GlobalStateManager.is_fp8_enabled())
    if not in_fp8 and module.training and (query.requires_grad or key.requires_grad or value.requires_grad):
        raise ConfigurationError(
            f"{type(module).__name__}: fp8 fused attention in a training step outside fp8_autocast, where the SDK "
            "runs it in bf16 (FusedSDPA): nothing would train in fp8. Accepted: train with precision='fp8' "
            "(HPUPrecisionPlugin('fp8')), or remove() the fp8 attention."
        )
    fused.scale = scaling
    fused.attention_dropout = dropout
    # A single query (decoding from a cache) attends to every key; otherwise the call is causal.
    out = fused(query, key, value, None, q_length > 1, handle.softmax_mode)
    if in_fp8:
        handle.fp8_calls += 1
    else:
        handle.other_calls += 1
    # The SDK's fp8 kernel returns bf16; the layer after attention expects the dtype it gave (float32 under 'fp8').
    return out.transpose(1, 2).to(query.dtype).contiguous(), None
