"""torch's bfloat16 compression hooks registered on an HCCL model, as GPU scripts pass them.

``DistributedDataParallel.register_comm_hook`` looks at a hook's name: for ``bf16_compress_hook`` and the hook that
``bf16_compress_wrapper`` returns (``bf16_compress_wrapper_hook``) it demands CUDA with NCCL 2.10 or XPU with XCCL,
the backends it knows to reduce bfloat16, and raises ``TypeError: BF16 all reduce communication hook required CUDA
11+ and NCCL 2.10+ or XPU and XCCL`` on any other device. HCCL reduces bfloat16 natively, and the hooks keep HCCL's
rules: they divide by the world size themselves and reduce with SUM (HCCL has no AVG). So the HPU strategy registers
these hooks under a name of their own (``hccl_<name>``), which is all that differs; the hook runs as torch wrote it.
The float16 hooks carry no such check and are registered as given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["hook_for_hccl"]

# The names DistributedDataParallel._check_comm_hook reserves for NCCL/XCCL (torch 2.9 to 2.13).
_BACKEND_CHECKED_NAMES = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def hook_for_hccl(hook: Callable[..., Any] | None, wrapper: Callable[..., Any] | None) -> tuple[Any, Any]:
    """The ``(hook, wrapper)`` to register on an HCCL model for the ``ddp_comm_hook`` / ``ddp_comm_wrapper`` given.

    Unchanged, unless the hook DDP would get (the wrapper applied) is one of torch's bfloat16 hooks; that one is
    returned applied and renamed, with no wrapper.

    Example:
        >>> from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        >>> hook, wrapper = hook_for_hccl(default_hooks.bf16_compress_hook, None)
        >>> hook.__name__, wrapper
        ('hccl_bf16_compress_hook', None)
    """
    if hook is None:
        return hook, wrapper
    applied = wrapper(hook) if wrapper is not None else hook
    name = getattr(applied, "__name__", None)
    if name not in _BACKEND_CHECKED_NAMES:
        return hook, wrapper

    # functools.wraps keeps the signature torch checks (annotations dist.GradBucket and Future[Tensor]).
    @functools.wraps(applied)
    def renamed(state: Any, bucket: Any) -> Any:
        return applied(state, bucket)

    renamed.__name__ = f"hccl_{name}"
    renamed.__qualname__ = f"hccl_{getattr(applied, '__qualname__', name)}"
    return renamed, None
