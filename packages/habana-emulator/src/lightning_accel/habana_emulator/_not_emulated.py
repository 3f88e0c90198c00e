"""The SDK names the emulator cannot provide honestly, with the reason, and the stand-ins that say so when used.

The SDK's public surface (gaudi-pytorch-bridge bcc5172, the 1.24 period, ``python_packages/habana_frameworks/torch/``;
the table in ``packages/habana-emulator/tests/data/habana_1_24_api.json``) has names whose work only a Gaudi can do:
Synapse graph compilation and its tuning switches, TPC/MME kernels, ``hl-smi`` and the runtime's event dispatcher. The
emulator does not fake them. Each is listed here with the reason:

* a whole module (:data:`MODULES`; a key ``X.*`` covers ``X`` and every module under it): importing it under emulation
  raises :class:`NotEmulatedModuleError`, an ``ImportError`` (libraries that try such an import and fall back keep
  working, as they would without the SDK) whose message names the module and the reason;
* a name of an emulated module (:data:`NAMES`): the module has the name, as the SDK does (``hasattr`` is true), and
  calling it (or using it as a value) raises :class:`NotEmulatedError` naming it and the reason.

Never an ``AttributeError``: that would read as "the SDK has no such name", which is false.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, NoReturn

__all__ = ["MODULES", "NAMES", "NotEmulatedError", "NotEmulatedModuleError", "install_finder", "provide"]

SDK = "habana_frameworks.torch"
EMULATOR = __name__.rpartition(".")[0]

_GRAPH_COMPILER = "Synapse graph compilation (the emulator runs every operation eagerly on its backing device)"
_KERNELS = "a fused Gaudi (TPC/MME) kernel the emulator does not have (use the plain torch operations)"
_TOOLS = "a debugging or profiling tool of the Gaudi runtime, which the emulator does not have"
_QUANT = "the SDK's quantization flow, which needs Gaudi's fp8 kernels and calibration"
_OPTIMIZERS = (
    "a fused Gaudi optimizer the emulator does not have (it emulates hpex.optimizers.FusedAdamW, FusedSGD, "
    "FusedAdagrad and FusedLamb); use one of those or torch.optim"
)
_MARKSTEP = (
    "torch's Adam/AdamW with lazy-mode mark_step calls (graph tuning of the Synapse compiler); use torch.optim or "
    "hpex.optimizers.FusedAdamW"
)

#: SDK module (or ``prefix.*``) -> why the emulator does not provide it.
MODULES: dict[str, str] = {
    f"{SDK}.activity_profiler.*": "the HPU activity profiler reads Gaudi's hardware trace (not emulated)",
    f"{SDK}.core.hccl": "an empty package of the SDK's C++ HCCL bindings",
    f"{SDK}.core.observer": _QUANT,
    f"{SDK}.core.pattern_matcher": _QUANT,
    f"{SDK}.core.quantization": _QUANT,
    f"{SDK}.core.quantize_pt2e": _QUANT,
    f"{SDK}.core.quantizer": _QUANT,
    f"{SDK}.core.torch_overwrites": "the SDK's wrappers of torch functions; their load effects are reproduced in "
    "place (docs/emulator.md, what loading the SDK does), the module itself is not",
    f"{SDK}.core.weight_sharing": "lazy-mode weight sharing between graphs of the Synapse compiler",
    f"{SDK}.distributed.tensor.*": "DTensor sharding rules of the SDK's own operators (torch.ops.hpu.linear, matmul "
    "and the fused attention kernels), which the emulator does not register",
    f"{SDK}.dynamo.compile_backend.*": "a part of the SDK's torch.compile backend other than hpu_backend: "
    + _GRAPH_COMPILER,
    f"{SDK}.dynamo.debug_utils.*": _TOOLS,
    f"{SDK}.dynamo.device_interface": "torch.compile's device interface for Gaudi's graph compiler; the emulator "
    "compiles for its backing device",
    f"{SDK}.dynamo.trace_rules": "dynamo trace rules of the SDK's compiled functions: " + _GRAPH_COMPILER,
    f"{SDK}.dynamo.utils": "helpers of the SDK's graph compiler: " + _GRAPH_COMPILER,
    f"{SDK}.hpex.kernels.CTCLoss": _KERNELS,
    f"{SDK}.hpex.kernels.CustomSoftmax": _KERNELS,
    f"{SDK}.hpex.kernels.EmbeddingBag": _KERNELS,
    f"{SDK}.hpex.kernels.EmbeddingBagPreproc": _KERNELS,
    f"{SDK}.hpex.kernels.MixtureOfExperts": "the fp8 mixture-of-experts wrappers of Gaudi's fused MoE kernels "
    "(torch.ops.hpu.mixture_of_experts), which the emulator does not have",
    f"{SDK}.hpex.kernels.PySDPA": _KERNELS,
    f"{SDK}.hpex.kernels.RandomSeed": _KERNELS,
    f"{SDK}.hpex.kernels.RotaryPosEmbeddingHelper": _KERNELS,
    f"{SDK}.hpex.kernels.Softmax": _KERNELS,
    f"{SDK}.hpex.kernels.fbgemm": _KERNELS,
    f"{SDK}.hpex.movingavrg.*": _KERNELS,
    f"{SDK}.hpex.normalization.FusedRMSNorm": _KERNELS,
    f"{SDK}.hpex.optimizers.FusedLars": _OPTIMIZERS,
    f"{SDK}.hpex.optimizers.FusedResourceApplyMomentum": _OPTIMIZERS,
    f"{SDK}.hpex.optimizers.MarkstepAdam": _MARKSTEP,
    f"{SDK}.hpex.optimizers.MarkstepAdamW": _MARKSTEP,
    f"{SDK}.hpex.optimizers.SparseAdagrad": _OPTIMIZERS,
    f"{SDK}.hpex.optimizers.SparseSGD": _OPTIMIZERS,
    f"{SDK}.hpex.optimizers.distributed.*": "the SDK's FusedAdamW for torch's distributed optimizers (overlapped "
    "with DDP's communication hooks); use hpex.optimizers.FusedAdamW",
    f"{SDK}.internal.*": "internal tools of the SDK (bridge configuration, Synapse recipe recording)",
    f"{SDK}.jit.*": "TorchScript passes of the SDK's graph compiler (its fork of torch.jit): " + _GRAPH_COMPILER,
    f"{SDK}.low_overhead_profiler.*": _TOOLS,
    f"{SDK}.media_pyt_bridge": "the Gaudi media pipeline (hardware decoders)",
    f"{SDK}.profiler.*": _TOOLS,
    f"{SDK}.utils.debug.*": _TOOLS,
    f"{SDK}.utils.distributed_utils": "helpers of the SDK's distributed emulation (PT_HPU_EMULATE_DISTRIBUTED)",
    f"{SDK}.utils.event_dispatcher": _TOOLS,
    f"{SDK}.utils.experimental.distributed_emulation": "the SDK's own distributed emulation "
    "(PT_HPU_EMULATE_DISTRIBUTED); the emulated hccl runs real processes",
    f"{SDK}.utils.lib_utils": "paths of the SDK's compiled libraries",
    f"{SDK}.utils.profiler": _TOOLS,
    f"{SDK}.utils.visualization.*": _TOOLS,
}

_SHAPES = "a switch of Synapse graph compilation: " + _GRAPH_COMPILER
_GRAPH_CACHE = (
    "an internal of the SDK's own HPU graph caches (ModuleCacher, wrap_in_hpu_graph); the emulator builds its caches "
    "differently (graphs keyed by input signature) and has no such object"
)
_HL_SMI = "reads hl-smi / the Gaudi management library, which the emulator does not have"

#: SDK module -> name -> why the emulator does not provide it (the module itself is emulated).
NAMES: dict[str, dict[str, str]] = {
    SDK: {
        "REQUIRED_VERSION_FILE": "the SDK's check of the torch version it was compiled for",
        "REQUIRED_VERSION_FILE_PATH": "the SDK's check of the torch version it was compiled for",
        "bc": "the SDK's bridge configuration (internal.bridge_config, a compiled module)",
        "lib_to_load": "the name of the SDK's compiled library",
        "libdir": "the directory of the SDK's compiled library (the emulator has none)",
        "libpath": "the path of the SDK's compiled library (the emulator has none)",
        "run_time_ver": "the SDK's check of the torch version it was compiled for",
    },
    f"{SDK}.core": {
        "add_step_closure": "lazy-mode step closures run by the SDK's graph executor: " + _GRAPH_COMPILER,
        "iter_mark_step": "lazy-mode step closures run by the SDK's graph executor: " + _GRAPH_COMPILER,
        "create_and_apply_on_import_wrapper": "an import-order workaround of the SDK's own loading",
        "htdebug": _TOOLS,
        "htexp": "the SDK's utils.experimental module under another name (use habana_frameworks.torch.utils"
        ".experimental)",
        "hpu_inference_initialize": _QUANT,
        "hpu_inference_reset_env": _QUANT,
        "hpu_inference_set_env": _QUANT,
        "hpu_initialize": _QUANT,
        "hpu_reset_env": _QUANT,
        "hpu_set_env": _QUANT,
        "hpu_set_inference_env": _QUANT,
        "hpu_teardown_inference_env": _QUANT,
        "import_compilers": "loads the SDK's graph compiler: " + _GRAPH_COMPILER,
        "import_hpu_partition": "loads the SDK's graph partitioner: " + _GRAPH_COMPILER,
        "overwrite_torch_functions": "the SDK's wrappers of torch functions; the emulator applies the ones that "
        "change behaviour when it loads, as the SDK does (docs/emulator.md)",
    },
    f"{SDK}.core.step_closure": {
        "add_step_closure": "lazy-mode step closures run by the SDK's graph executor: " + _GRAPH_COMPILER,
        "iter_mark_step": "lazy-mode step closures run by the SDK's graph executor: " + _GRAPH_COMPILER,
        "htcore": "the SDK's compiled core module",
        "lazy_only": "a decorator of the SDK's lazy-mode functions",
    },
    f"{SDK}.hpu": {
        "BFloat16Tensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "BoolTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "ByteTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "CharTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "DoubleTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "FloatTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "HalfTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "IntTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "LongTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "ShortTensor": "legacy typed-tensor constructors of the SDK's C++ bindings",
        "StreamContext": "the SDK's stream context of its C++ stream bindings; use hpu.stream(s)",
        "can_device_access_peer": "peer access between Gaudi cards (the emulated cards share one backing device)",
        "disable_const_section_serialization": _SHAPES,
        "enable_const_section_serialization": _SHAPES,
        "disable_dynamic_shape": _SHAPES,
        "enable_dynamic_shape": _SHAPES,
        "get_dynamic_shape_status": _SHAPES,
        "disable_inference_mode": _SHAPES,
        "enable_inference_mode": _SHAPES,
        "is_inference_mode_enabled": _SHAPES,
        "disable_matmul3d_2d_reshape": _SHAPES,
        "enable_matmul3d_2d_reshape": _SHAPES,
        "is_matmul3d_2d_reshape_enabled": _SHAPES,
        "disable_optim_output_sif": _SHAPES,
        "enable_optim_output_sif": _SHAPES,
        "disable_quantization": _QUANT,
        "enable_quantization": _QUANT,
        "set_mark_non_scale_const": "marks which weights the graph compiler folds as constants in quantized inference: "
        + _QUANT,
        "set_mark_scale_const": "marks which scales the graph compiler folds as constants in quantized inference: "
        + _QUANT,
        "get_device_capability": "the Gaudi card's capability string, read from the card",
        "get_device_properties": "the Gaudi card's properties, read from the card",
        "get_stream_info": "the SDK's C++ stream bookkeeping",
        "memory_summary": "the Gaudi allocator's own summary (use memory_stats, which is emulated)",
        "memory_usage": _HL_SMI,
        "utilization": _HL_SMI,
        "reset_accumulated_memory_stats": "the Gaudi allocator's accumulated counters (NumAllocs and NumFrees are "
        "counted from the start of the process on the emulator)",
        "record_stream": "the SDK's stream bookkeeping of its C++ allocator; tensor.record_stream works",
        "set_stream": "the SDK's C++ stream switch; use hpu.stream(s)",
        "is_lazy_mode": "a module-level flag of the SDK's streams module; use habana_frameworks.torch.core.is_lazy()",
    },
    f"{SDK}.hpu.graphs": {
        "CachedParams": _GRAPH_CACHE,
        "GraphModel": _GRAPH_CACHE,
        "TensorPacker": _GRAPH_CACHE,
        "wrapped_hpugraph_forward": "the per-call body of the SDK's wrap_in_hpu_graph over a dict of CachedParams; "
        "the emulated wrap_in_hpu_graph and wrap_in_hpu_graph_func replay graphs from caches of their own",
        "hpu_graph_print": "writes to the SDK's C++ HPU-graph log (PT_HPUGRAPH_DEBUG, from utils.debug): " + _TOOLS,
    },
    f"{SDK}.hpu.random": {"htcore": "the SDK's compiled core module (_core_C)"},
    f"{SDK}.distributed.hccl": {
        "distributed_emulation_apply_if_enabled": "the SDK's own distributed emulation (PT_HPU_EMULATE_DISTRIBUTED); "
        "the emulated hccl runs real processes",
        "is_distributed_emulation_enabled": "the SDK's own distributed emulation (PT_HPU_EMULATE_DISTRIBUTED); "
        "the emulated hccl runs real processes",
    },
    f"{SDK}.dynamo": {
        "HpuInterface": "torch.compile's device interface for Gaudi's graph compiler; the emulator compiles for its "
        "backing device",
    },
    f"{SDK}.dynamo.compile_backend": {
        "bc": "the SDK's bridge configuration (internal.bridge_config, a compiled module)",
    },
    f"{SDK}.dynamo.compile_backend.backends": {
        "get_hpu_decompositions": "the SDK's graph compiler's decompositions: " + _GRAPH_COMPILER,
        "import_compilers": "loads the SDK's graph compiler: " + _GRAPH_COMPILER,
        "import_hpu_partition": "loads the SDK's graph partitioner: " + _GRAPH_COMPILER,
        "override_composite_ops": "the SDK's graph compiler's decompositions: " + _GRAPH_COMPILER,
        "logger": "the SDK compile backend's logger",
    },
    f"{SDK}.utils.internal": {
        "Timer": "a timing helper of the SDK's graph compiler",
        "lazy_only": "a decorator of the SDK's lazy-mode functions",
        "logger": "the SDK's logger",
    },
    f"{SDK}.hpu.metrics.metrics": {
        "EventDispatcher": "the bridge's C++ event dispatcher (the SDK's utils.event_dispatcher module); the emulated "
        "metrics listen to the emulator's own events",
        "EventId": "the topics of the bridge's C++ event dispatcher (the SDK's utils.event_dispatcher module)",
        "bc": "the SDK's bridge configuration (internal.bridge_config, a compiled module)",
    },
    f"{SDK}.hw_utilization_metric.hw_utilization_metric": {
        "HWUtilizationMetrics": "the card's utilization as hl-smi reports it and the busy share of its compute "
        "stream; the emulator has no card and no compute stream of its own (work runs in issue order on the "
        "backing device)",
        "utilization_metrics": "the SDK's compiled utilization counters (utils._utilization_metrics_C)",
    },
    f"{SDK}.utils.library_loader": {
        "load_habana_module": "loads the SDK's compiled libraries (the emulator has none)",
    },
    f"{SDK}.utils.experimental": {
        "hpu": "the hpu module under another name (use habana_frameworks.torch.hpu)",
        "htmem": "the hpu.memory module under another name (use habana_frameworks.torch.hpu.memory)",
    },
    f"{SDK}.hpex.kernels": {
        "CTCLoss": _KERNELS,
        "CustomSoftmax": _KERNELS,
        "PySDPA": _KERNELS,
        "PySDPAHinted": _KERNELS,
        "RotaryPosEmbeddingHelperV1": _KERNELS,
        "RotaryPosEmbeddingHelperV2": _KERNELS,
        "RotaryPosEmbeddingHelperV3": _KERNELS,
        "RotaryPosEmbeddingMode": _KERNELS,
        "apply_rotary_pos_emb": _KERNELS,
    },
    f"{SDK}.hpex.normalization": {"FusedRMSNorm": _KERNELS, "RmsNormBwdMode": _KERNELS},
    f"{SDK}.hpex.optimizers": {
        "Adam": _MARKSTEP,
        "AdamW": _MARKSTEP,
        "FusedLars": _OPTIMIZERS,
        "FusedResourceApplyMomentum": _OPTIMIZERS,
    },
    f"{SDK}.hpex.experimental.transformer_engine.module.linear": {
        "tex": "the SDK's compiled Transformer Engine extension (_hpex_C), Gaudi kernels"
    },
}


class NotEmulatedError(NotImplementedError):
    """An SDK name was used that the emulator does not provide; the message names it and says why."""


class NotEmulatedModuleError(ImportError):
    """An SDK module was imported that the emulator does not provide; the message names it and says why."""


def _message(name: str, reason: str) -> str:
    return (
        f"{name} is not emulated: {reason}. It exists in the Gaudi SDK and works on Gaudi hardware; the software "
        "emulator (LIGHTNING_ACCEL_EMULATE=hpu) cannot reproduce it, so it refuses rather than pretend. Run this on a "
        "Gaudi, or leave the call out when emulated (docs/emulator.md lists what is not emulated)."
    )


def module_reason(sdk_module: str) -> str | None:
    """Why ``sdk_module`` is not emulated, or ``None`` when it is (or is not an SDK module the table knows)."""
    if sdk_module in MODULES:
        return MODULES[sdk_module]
    parts = sdk_module.split(".")
    for end in range(len(parts), 0, -1):
        reason = MODULES.get(".".join(parts[:end]) + ".*")
        if reason is not None:
            return reason
    return None


class _NotEmulatedValue:
    """The stand-in of a value the emulator does not provide: any use raises :class:`NotEmulatedError`."""

    def __init__(self, qualname: str, reason: str) -> None:
        object.__setattr__(self, "_qualname", qualname)
        object.__setattr__(self, "_reason", reason)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotEmulatedError(
            _message(object.__getattribute__(self, "_qualname"), object.__getattribute__(self, "_reason"))
        )

    __call__ = _refuse
    __getattr__ = _refuse
    __iter__ = _refuse
    __bool__ = _refuse
    __int__ = _refuse
    __index__ = _refuse
    __len__ = _refuse

    def __repr__(self) -> str:
        return f"<not emulated: {object.__getattribute__(self, '_qualname')}>"


def _stand_in(qualname: str, reason: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotEmulatedError(_message(qualname, reason))

    refuse.__name__ = qualname.rpartition(".")[2]
    refuse.__qualname__ = refuse.__name__
    refuse.__doc__ = f"Not emulated: {reason}."
    refuse.__not_emulated__ = reason  # type: ignore[attr-defined]  # how the API-table test tells stand-ins apart
    return refuse


def stand_in(sdk_module: str, name: str) -> Any:
    """The object that stands for ``sdk_module.name`` in the emulator: it raises when used."""
    return _stand_in(f"{sdk_module}.{name}", NAMES[sdk_module][name])


def provide(
    namespace: dict[str, Any], sdk_module: str, names: tuple[str, ...] | None = None, listed_in: str | None = None
) -> None:
    """Put the stand-ins of ``sdk_module``'s not-emulated names (or of ``names`` among them) into ``namespace``.

    ``listed_in`` names the module whose list gives the reasons, when ``sdk_module`` re-exports them (the SDK's
    ``hpu`` star-imports ``hpu.memory`` and ``hpu.streams``).
    """
    listed = NAMES[listed_in or sdk_module] if (listed_in or sdk_module) in NAMES else {}
    for name in names if names is not None else tuple(listed):
        namespace[name] = _stand_in(f"{sdk_module}.{name}", listed[name])


class _RefusingLoader(importlib.abc.Loader):
    def __init__(self, sdk_module: str, reason: str) -> None:
        self.sdk_module, self.reason = sdk_module, reason

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        raise NotEmulatedModuleError(_message(self.sdk_module, self.reason), name=self.sdk_module)


class _NotEmulatedFinder(importlib.abc.MetaPathFinder):
    """Answers the emulator's name of a not-emulated SDK module with a module whose import refuses, saying why."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(EMULATOR + "."):
            return None
        sdk_module = SDK + fullname[len(EMULATOR) :]
        reason = module_reason(sdk_module)
        if reason is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _RefusingLoader(sdk_module, reason), is_package=True)


def install_finder() -> None:
    """Make imports of not-emulated SDK modules fail with :class:`NotEmulatedModuleError` (once per process)."""
    if not any(isinstance(finder, _NotEmulatedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_NotEmulatedFinder())
