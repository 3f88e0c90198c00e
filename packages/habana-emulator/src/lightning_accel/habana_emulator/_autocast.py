"""The SDK's autocast for ``"hpu"``: ``torch.autocast(device_type="hpu")`` casts per ATen operator as on Gaudi.

Every rule here is the Gaudi bridge's (gaudi-pytorch-bridge 1.19.0, ``hpu_ops/autocast_helpers.h``,
``hpu_ops/backend/autocast_helpers.cpp``, and the autocast registrations that ``scripts/gen_op.py`` generates):

* **Lists, read once.** When the SDK loads, each list is read from the file named by
  ``PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST`` / ``PT_HPU_AUTOCAST_FP32_OPS_LIST`` (one ATen operator name per line,
  each line taken as it is), or is the SDK's default list when the variable is unset. A custom list replaces that
  category's default. A file that cannot be opened is logged as a warning and the default list is used. A name that
  is no ATen operator matches nothing and is ignored, as on the SDK. Setting the variables later changes nothing.
* **Kernels for the autocast key.** For every ATen operator in the lists, each functional overload (not in-place,
  not ``out=``, no ``backward``) gets a kernel for the device's autocast key (``AutocastHPU``, as on Gaudi:
  the emulated device is c10's HPU); every other operator falls through. Operators are
  matched by their ATen name whatever Python spelling called them (``F.linear``, ``x @ w``, ``torch.mm``).
  The kernels are C++, the emulated device's (``emulated_hpu/csrc/amp``), as the bridge's: a call under autocast
  pays no Python. This module reads the lists and picks the overloads and their policies once, at load.
* **Policies.** An operator in the lower-precision list casts its floating-point ``"hpu"`` inputs to the autocast
  dtype (``torch.autocast(..., dtype=)``), except ``layer_norm``, ``group_norm``, ``instance_norm`` and
  ``batch_norm``, which cast only their first input; otherwise an operator in the float32 list casts them to
  float32 (the lower list wins when a name is in both); otherwise an operator of the promote set (``add``,
  ``addcmul``, ``addcdiv``, ``cat``, ``div``, ``exp``, ``mul``, ``pow``, ``sub``, ``iadd``, ``truediv``, ``stack``)
  runs in the widest dtype among its inputs; any other operator runs on its inputs as they are. float64 tensors and
  tensors on other devices are never cast. Casts are not cached.

The casts run above autograd (the autocast key comes before the autograd key), so they are recorded and gradients
reach float32 parameters in float32. ``torch.autocast("hpu", enabled=False)`` turns the kernels off inside a block.
What the emulator cannot reproduce are the numerics of Gaudi's kernels (MME matrix engine, TPC cores): the cast
operations run on the backing device's kernels, so results in bfloat16 match a CPU (or CUDA) bfloat16 computation,
not Gaudi's bit for bit.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from . import _native

__all__ = [
    "DEFAULT_FP32_OPS",
    "DEFAULT_LOWER_OPS",
    "FP32_LIST_VAR",
    "LOWER_FIRST_OPS",
    "LOWER_LIST_VAR",
    "PROMOTE_OPS",
    "AutocastLists",
    "install",
    "loaded_lists",
]

logger = logging.getLogger("habana_frameworks.torch.autocast")

LOWER_LIST_VAR = "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST"
FP32_LIST_VAR = "PT_HPU_AUTOCAST_FP32_OPS_LIST"

# autocast_helpers.h: default_lower_ops, default_fp32_ops, lower_first_ops, promote_list.
DEFAULT_LOWER_OPS = frozenset(
    {
        "addmm", "addbmm", "batch_norm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "dot", "dropout", "feature_dropout", "group_norm", "instance_norm",
        "layer_norm", "leaky_relu", "linear", "matmul", "mean", "mm", "mul", "mv", "softmax", "log_softmax",
        "scaled_dot_product_attention",
    }
)  # fmt: skip
DEFAULT_FP32_OPS = frozenset(
    {
        "acos", "addcdiv", "asin", "atan2", "bilinear", "binary_cross_entropy", "binary_cross_entropy_with_logits",
        "cdist", "cosh", "cosine_embedding_loss", "cosine_similarity", "cross_entropy_loss", "dist", "div", "divide",
        "embedding", "embedding_bag", "erfinv", "exp", "expm1", "hinge_embedding_loss", "huber_loss", "kl_div",
        "l1_loss", "log", "log10", "log1p", "log2", "logsumexp", "margin_ranking_loss", "mse_loss",
        "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "pdist", "poisson_nll_loss", "pow", "reciprocal",
        "renorm", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss", "softplus", "tan", "topk",
        "triplet_margin_loss", "truediv", "true_divide",
    }
)  # fmt: skip
LOWER_FIRST_OPS = frozenset({"layer_norm", "group_norm", "instance_norm", "batch_norm"})
PROMOTE_OPS = frozenset(
    {"add", "addcmul", "addcdiv", "cat", "div", "exp", "mul", "pow", "sub", "iadd", "truediv", "stack"}
)

# gen_op.py: operators that never get an autocast kernel (besides in-place, out= and backward ones).
_BLOCKLIST = frozenset(
    {
        "_cummax_helper", "_cummin_helper", "fused_moving_avg_obs_fake_quant", "_fused_moving_avg_obs_fq_helper",
        "_native_batch_norm_legit", "sym_size", "sym_numel", "sym_stride", "sym_storage_offset",
        "_scaled_dot_product_flash_attention", "_efficient_attention_forward", "_batch_norm_with_update",
        "_scaled_dot_product_fused_attention_overrideable",
    }
)  # fmt: skip
# gen_op.py registers only operators with a function variant (``at::name``); these are torch's namespaces of them.
_FUNCTION_NAMESPACES = ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft")

# The C++ device's CastPolicy names (the bridge's Hpu_CastPolicy).
_LOWER, _LOWER_FIRST, _FP32, _PROMOTE = "lower_precision_fp", "lower_first_arg", "fp32", "promote"


@dataclass(frozen=True)
class AutocastLists:
    """The lists the SDK loaded.

    Attributes:
        lower: Operators run in the autocast dtype.
        fp32: Operators run in float32.
        lower_file: The file the lower list came from (``None``: the default list).
        fp32_file: The file the float32 list came from (``None``: the default list).
    """

    lower: frozenset[str]
    fp32: frozenset[str]
    lower_file: str | None = None
    fp32_file: str | None = None

    def policy(self, name: str) -> str | None:
        """The cast policy of ATen operator ``name`` (``None``: it runs on its inputs as they are)."""
        if name in self.lower:
            return _LOWER_FIRST if name in LOWER_FIRST_OPS else _LOWER
        if name in self.fp32:
            return _FP32
        if name in PROMOTE_OPS:
            return _PROMOTE
        return None


def _load_list(variable: str, default: frozenset[str]) -> tuple[frozenset[str], str | None]:
    # autocast_helpers.cpp load_list: getenv; unset -> default; unopenable -> warning and default; else every line
    # (std::getline: without its "\n", otherwise untouched) is a name.
    path = os.environ.get(variable)
    if path is None:
        return default, None
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            text = handle.read()
    except OSError:
        logger.warning("Failed to open file with ops to autocast: %s. Default list loaded.", path)
        return default, None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    logger.debug("Autocast ops loaded via %s: %s", variable, ", ".join(lines))
    return frozenset(lines), path


_lock = threading.Lock()
_lists: AutocastLists | None = None


def loaded_lists() -> AutocastLists:
    """The lists read when the SDK loaded (reads them now if :func:`install` has not run)."""
    return _lists if _lists is not None else _read_lists()


def _read_lists() -> AutocastLists:
    lower, lower_file = _load_list(LOWER_LIST_VAR, DEFAULT_LOWER_OPS)
    fp32, fp32_file = _load_list(FP32_LIST_VAR, DEFAULT_FP32_OPS)
    return AutocastLists(lower, fp32, lower_file, fp32_file)


def install() -> None:
    """Read the lists and register the autocast kernels for ``"hpu"``; once per process (the SDK's load).

    The kernels are the C++ device's (``csrc/amp``); this picks the operator overloads and their policies.
    """
    global _lists
    with _lock:
        if _lists is not None:
            return
        lists = _read_lists()
        policies = _native.device().CastPolicy
        operators: list[tuple[str, Any]] = []  # (overload name, the device's CastPolicy)
        for name in sorted(lists.lower | lists.fp32 | PROMOTE_OPS):
            policy = lists.policy(name)
            if policy is None:
                continue
            operators.extend((_overload_name(op), getattr(policies, policy)) for op in _overloads(name))
        _native.device().register_autocast(operators)
        _lists = lists


def _overload_name(op: torch._ops.OpOverload) -> str:
    # "add.Tensor", or "linear" for the default overload: the name a registration in the aten namespace takes.
    schema = op._schema
    name = schema.name.removeprefix("aten::")
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _overloads(name: str) -> Iterable[torch._ops.OpOverload]:
    """The overloads of ATen operator ``name`` that the bridge gives autocast kernels (none for unknown names)."""
    if (
        not name.isidentifier()
        or name.endswith(("_", "_out"))
        or any(part in name for part in ("backward", "cuda", "cudn"))
        or name in _BLOCKLIST
        or not any(hasattr(getattr(torch._C, space, None), name) for space in _FUNCTION_NAMESPACES)
    ):
        return []
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return []
    found = []
    for overload in packet.overloads():
        op = getattr(packet, overload)
        schema = op._schema
        # In-place and out= overloads write into an argument: never cast (a cast copy would receive the result).
        if schema.is_mutable or not any("Tensor" in str(argument.type) for argument in schema.arguments):
            continue
        found.append(op)
    return found
