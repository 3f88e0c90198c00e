"""Intel Gaudi (HPU) support for PyTorch Lightning 2.6.

Accelerator, strategies, mixed precision, HPU graphs, ``torch.compile`` backends, profiler, checkpoint I/O and the
SDK seam.

Importing this package is cheap: it imports neither torch, Lightning nor the Habana SDK. The public classes are
loaded on first access, and the SDK (or its emulator, with ``LIGHTNING_ACCEL_EMULATE=hpu``) the first time an HPU is
used. This keeps the ``lightning_accel.plugins`` entry point (``lightning_accel.habana.plugin:PLUGIN``) cheap to load.

Example:
    >>> from lightning.pytorch import Trainer
    >>> from lightning_accel.habana import HPUAccelerator, SingleHPUStrategy
    >>> trainer = Trainer(accelerator=HPUAccelerator(), strategy=SingleHPUStrategy(), devices=1)  # doctest: +SKIP
"""

import sys
from typing import TYPE_CHECKING

import _lightning_accel_autoload  # type: ignore[import-untyped]  # the core's start-up hook, a top-level module

import lightning_accel.core  # noqa: F401  (importing the core registers every installed plugin into Lightning)
from lightning_accel.core.lazy import lazy_exports

from . import sdk
from .__about__ import __version__

# Importing this package is a request to register, even where the core was imported before (by the emulated SDK's
# load, which is not one: then this package is imported again by the user's own import, see sdk_load).
_REGISTERS_ON_IMPORT = True
if not _lightning_accel_autoload.loading_sdk():
    _lightning_accel_autoload.install(explicit=True)
# Imported again after an emulated SDK's load had imported it: its submodules are still loaded, bind them again.
for _name, _module in list(sys.modules.items()):
    if _name.startswith(__name__ + ".") and "." not in _name[len(__name__) + 1 :] and _module is not None:
        globals().setdefault(_name.rpartition(".")[2], _module)

if TYPE_CHECKING:
    from .accelerator import HPUAccelerator
    from .adjusted_throughput import AdjustedThroughputMonitor
    from .checkpoint_io import HPUCheckpointIO
    from .compilation import HPUCompile
    from .compile_backends import aot_hpu_inference_backend, aot_hpu_training_backend, hpu_backend
    from .compile_metrics import HPUCompileMetrics
    from .context_parallel import ContextParallel, HPUContextParallelStrategy
    from .dynamo_settings import DynamoSettings
    from .fsdp_precision import HPUFSDPPrecision
    from .fused import fused_adamw, fused_clip_grad_norm_, fused_optimizer, fused_sdpa, use_fused_sdpa
    from .fused_clip import HPUFusedClipNorm
    from .grad_scaler import HPUGradScaler, HPUShardedGradScaler
    from .graphs import HPUGraphs
    from .lazy_steps import PipelineForwardBackward
    from .precision import HPUPrecisionPlugin
    from .profiler import HPUProfiler
    from .sdp_settings import SDPOnBF16
    from .strategies import HPUFSDPStrategy, HPUModelParallelStrategy, HPUParallelStrategy, SingleHPUStrategy
    from .strategies.fast_ddp import HPUFastDDPStrategy

__all__ = [
    "AdjustedThroughputMonitor",
    "ContextParallel",
    "DynamoSettings",
    "HPUAccelerator",
    "HPUCheckpointIO",
    "HPUCompile",
    "HPUCompileMetrics",
    "HPUContextParallelStrategy",
    "HPUFSDPPrecision",
    "HPUFastDDPStrategy",
    "HPUFSDPStrategy",
    "HPUFusedClipNorm",
    "HPUGradScaler",
    "HPUGraphs",
    "HPUModelParallelStrategy",
    "HPUParallelStrategy",
    "HPUPrecisionPlugin",
    "HPUProfiler",
    "HPUShardedGradScaler",
    "PipelineForwardBackward",
    "SDPOnBF16",
    "SingleHPUStrategy",
    "__version__",
    "aot_hpu_inference_backend",
    "aot_hpu_training_backend",
    "fused_adamw",
    "fused_clip_grad_norm_",
    "fused_optimizer",
    "fused_sdpa",
    "hpu_backend",
    "sdk",
    "use_fused_sdpa",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "HPUAccelerator": ".accelerator",
        "AdjustedThroughputMonitor": ".adjusted_throughput",
        "DynamoSettings": ".dynamo_settings",
        "HPUFusedClipNorm": ".fused_clip",
        "PipelineForwardBackward": ".lazy_steps",
        "SDPOnBF16": ".sdp_settings",
        "HPUCheckpointIO": ".checkpoint_io",
        "HPUCompile": ".compilation",
        "HPUCompileMetrics": ".compile_metrics",
        "ContextParallel": ".context_parallel",
        "HPUContextParallelStrategy": ".context_parallel",
        "HPUFSDPPrecision": ".fsdp_precision",
        "HPUFSDPStrategy": ".strategies",
        "HPUFastDDPStrategy": ".strategies.fast_ddp",
        "HPUGradScaler": ".grad_scaler",
        "HPUGraphs": ".graphs",
        "HPUModelParallelStrategy": ".strategies",
        "HPUParallelStrategy": ".strategies",
        "HPUPrecisionPlugin": ".precision",
        "HPUProfiler": ".profiler",
        "HPUShardedGradScaler": ".grad_scaler",
        "SingleHPUStrategy": ".strategies",
        "aot_hpu_inference_backend": ".compile_backends",
        "aot_hpu_training_backend": ".compile_backends",
        "fused_adamw": ".fused",
        "fused_clip_grad_norm_": ".fused",
        "fused_optimizer": ".fused",
        "fused_sdpa": ".fused",
        "hpu_backend": ".compile_backends",
        "use_fused_sdpa": ".fused",
    },
)
