"""Reduced-precision reductions in torch's math attention for one run (optimum-habana's ``sdp_on_bf16``).

``torch.nn.functional.scaled_dot_product_attention`` falls back to its math implementation where no fused kernel
takes the call (on an HPU, unless the model uses FusedSDPA). For bfloat16 and float16 inputs that implementation
upcasts to float32 unless ``torch._C._set_math_sdp_allow_fp16_bf16_reduction(True)`` allows it to reduce in the
inputs' dtype, which is what optimum-habana's ``sdp_on_bf16=True`` sets, for the whole process. :class:`SDPOnBF16`
sets it for a run and restores the previous value after.
"""

from __future__ import annotations

from ._run_setting import RunSetting

__all__ = ["SDPOnBF16"]


class SDPOnBF16(RunSetting):
    """Let torch's math attention reduce in bfloat16/float16 during a run (``sdp_on_bf16``), restored after.

    A ``Trainer`` callback, or a context manager around Fabric code.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.sdp_settings import SDPOnBF16
        >>> trainer = Trainer(accelerator="hpu", precision="bf16-mixed", callbacks=[SDPOnBF16()])  # doctest: +SKIP
        >>> with SDPOnBF16():  # with Fabric, around the loop  # doctest: +SKIP
        ...     train(fabric, model, optimizer)
    """

    def __init__(self) -> None:
        self._before: bool | None = None

    def apply(self) -> None:
        """Allow the reduced-precision reduction, keeping the previous value to restore."""
        import torch

        if self._before is None:
            self._before = bool(torch._C._get_math_sdp_allow_fp16_bf16_reduction())
            torch._C._set_math_sdp_allow_fp16_bf16_reduction(True)

    def restore(self) -> None:
        """Put the previous value back."""
        import torch

        if self._before is not None:
            torch._C._set_math_sdp_allow_fp16_bf16_reduction(self._before)
            self._before = None
