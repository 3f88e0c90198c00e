"""The one module that knows Lightning's two trees and the private names lightning-accel touches.

Lightning 2.6 installs its code twice: ``lightning.pytorch`` / ``lightning.fabric`` and the twins ``pytorch_lightning``
/ ``lightning_fabric``, each with its own registries and classes. Every other module of lightning-accel imports
Lightning's public API as ``lightning.pytorch`` / ``lightning.fabric`` (the core builds twins of vendor classes for
the other tree, see :mod:`lightning_accel.core.twins`) and any private name from here, so that an upgrade of
Lightning breaks in exactly one place.

:data:`PRIVATE_NAMES` declares every private Lightning name the project touches: the core's wraps of the
connectors, and each vendor package's overrides, calls and attribute reads of Lightning's private members (Python's
override syntax must stay in the subclass, so those are declared here and checked, not moved).
:func:`check_private_name` checks one declaration against the installed Lightning (the module, the object, its kind
and, for callables, its parameter names), and the core's test suite checks them all on every supported Lightning,
so an upgrade that moves one fails naming it. Private names imported by vendor modules come from here too:
:func:`init_dist_connection` at run time, and for annotations ``AcceleratorRegistryType`` and ``PathType`` (under
``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import Version

from lightning_accel.core.errors import UnsupportedLightningError

if TYPE_CHECKING:
    # For vendor annotations only (`if TYPE_CHECKING: from lightning_accel.core.compat import PathType`).
    from lightning.fabric.accelerators.registry import _AcceleratorRegistry as AcceleratorRegistryType  # noqa: F401
    from lightning.fabric.utilities.types import _PATH as PathType  # noqa: F401

__all__ = [
    "PRIVATE_NAMES",
    "TESTED_LIGHTNING",
    "PrivateName",
    "TRIGGERS",
    "Tree",
    "check_lightning_version",
    "check_private_name",
    "connector_class",
    "device_info_module",
    "fabric_cli_choices",
    "init_dist_connection",
    "is_interactive",
    "lightning_module_compile_context",
    "register_ddp_comm_hook",
    "log_as_connector",
    "lightning_version",
    "misconfiguration_exception",
    "registries",
    "set_num_threads_if_needed",
    "wrap_fabric_reapply_compile",
]

# The range whose connector code the selection wraps were written against and tested with: 2.3 is the newest
# Lightning on torch 2.0.1, which the last poptorch requires; every name in PRIVATE_NAMES is checked on 2.3 and 2.6.
TESTED_LIGHTNING = (Version("2.3.0"), Version("2.7.0"))

Flavour = Literal["lightning", "pytorch_lightning"]
Kind = Literal["pytorch", "fabric"]


@dataclass(frozen=True)
class Tree:
    """One of Lightning's four importable roots.

    Attributes:
        module: The root module name, e.g. ``"lightning.pytorch"`` or ``"lightning_fabric"``.
        kind: ``"pytorch"`` (Trainer) or ``"fabric"``.
        flavour: ``"lightning"`` (the unified package) or ``"pytorch_lightning"`` (the standalone twins).
        distribution: The distribution whose version guards this tree.
    """

    module: str
    kind: Kind
    flavour: Flavour
    distribution: str


TRIGGERS: dict[str, Tree] = {
    "lightning.pytorch": Tree("lightning.pytorch", "pytorch", "lightning", "lightning"),
    "lightning.fabric": Tree("lightning.fabric", "fabric", "lightning", "lightning"),
    "pytorch_lightning": Tree("pytorch_lightning", "pytorch", "pytorch_lightning", "pytorch-lightning"),
    "lightning_fabric": Tree("lightning_fabric", "fabric", "pytorch_lightning", "lightning-fabric"),
}


def lightning_version(tree: Tree) -> Version | None:
    """The installed version of the distribution behind ``tree``, or ``None`` when it is not installed."""
    module = sys.modules.get(tree.module)
    declared = getattr(module, "__version__", None) if module is not None else None
    if isinstance(declared, str):
        return Version(declared)
    names = (tree.distribution, "lightning") if tree.distribution == "lightning-fabric" else (tree.distribution,)
    for name in names:
        try:
            return Version(version(name))
        except PackageNotFoundError:
            continue
    return None


def check_lightning_version(tree: Tree) -> None:
    """Refuse a Lightning outside the tested range instead of guessing at its internals.

    Raises:
        UnsupportedLightningError: When the installed version is outside :data:`TESTED_LIGHTNING`.
    """
    found = lightning_version(tree)
    low, high = TESTED_LIGHTNING
    if found is None or not low <= Version(found.base_version) < high:
        raise UnsupportedLightningError(
            f"lightning-accel supports {tree.distribution} >={low},<{high}, but {found or 'an unknown version'} is "
            f"installed (tree {tree.module!r}). Install a supported version, e.g. `pip install "
            f"'{tree.distribution}>={low},<{high}'`, or upgrade lightning-accel-core."
        )


def registries(tree: Tree) -> tuple[dict[str, Any], dict[str, Any]]:
    """The accelerator and strategy registries of an imported tree."""
    if tree.kind == "pytorch":
        accelerators = sys.modules[f"{tree.module}.accelerators"]
        strategies = sys.modules[f"{tree.module}.strategies"]
        return accelerators.AcceleratorRegistry, strategies.StrategyRegistry
    accelerators = sys.modules[f"{tree.module}.accelerators"]
    strategies = sys.modules[f"{tree.module}.strategies"]
    return accelerators.ACCELERATOR_REGISTRY, strategies.STRATEGY_REGISTRY


def connector_class(tree: Tree) -> type:
    """The private connector class that resolves ``accelerator=`` / ``strategy=`` for the tree."""
    if tree.kind == "pytorch":
        module: ModuleType = __import__(
            f"{tree.module}.trainer.connectors.accelerator_connector", fromlist=["_AcceleratorConnector"]
        )
        connector: type = module._AcceleratorConnector
        return connector
    module = __import__(f"{tree.module}.connector", fromlist=["_Connector"])
    fabric_connector: type = module._Connector
    return fabric_connector


def is_interactive(tree: Tree) -> bool:
    """Lightning's ``_IS_INTERACTIVE`` as the tree's connector reads it (a notebook or ``python -i``)."""
    module = sys.modules[connector_class(tree).__module__]
    return bool(getattr(module, "_IS_INTERACTIVE", False))


def log_as_connector(tree: Tree, message: str) -> None:
    """Log ``message`` on rank zero through the tree's connector module, where Lightning logs its own choices."""
    module = sys.modules[connector_class(tree).__module__]
    module.rank_zero_info(message)


def device_info_module(tree: Tree) -> ModuleType | None:
    """The Trainer module whose ``_log_device_info`` prints "GPU available: ..." at start (``None`` for Fabric).

    ``Trainer.__init__`` calls it as ``setup._log_device_info(self)``, looked up on the module at each call.
    """
    if tree.kind != "pytorch":
        return None
    return importlib.import_module(f"{tree.module}.trainer.setup")


def misconfiguration_exception(tree: Tree) -> type[Exception]:
    """The ``MisconfigurationException`` class of an imported tree (one per flavour in Lightning 2.6)."""
    module = importlib.import_module(f"{tree.module}.utilities.exceptions")
    exception: type[Exception] = module.MisconfigurationException
    return exception


# --- names requested by vendor packages ---


def init_dist_connection(cluster_environment: Any, backend: str, **kwargs: Any) -> None:
    """Lightning's ``_init_dist_connection``: join the process group as Lightning's strategies do.

    It sets ``MASTER_ADDR``/``MASTER_PORT`` from ``cluster_environment``, calls ``init_process_group`` with ``kwargs``
    and prints Lightning's rank-0 banner. Both trees' copies do the same; the ``lightning.fabric`` one serves
    strategies of either tree.
    """
    from lightning.fabric.utilities.distributed import _init_dist_connection

    _init_dist_connection(cluster_environment, backend, **kwargs)


def register_ddp_comm_hook(model: Any, state: Any, hook: Any, wrapper: Any) -> None:
    """Lightning's ``_register_ddp_comm_hook``: register a DDP communication hook (and wrapper) on ``model``.

    Lightning's ``DDPStrategy`` calls it for CUDA devices only; the function itself is torch's ``register_comm_hook``
    with Lightning's wrapper handling, for any device. Nothing happens when ``hook`` is ``None``.
    """
    from lightning.pytorch.overrides.distributed import _register_ddp_comm_hook

    _register_ddp_comm_hook(model=model, ddp_comm_state=state, ddp_comm_hook=hook, ddp_comm_wrapper=wrapper)


def set_num_threads_if_needed(num_processes: int) -> None:
    """Lightning's ``_set_num_threads_if_needed``: share the host's threads among the processes of a run.

    Lightning's launchers call it; both trees' copies do the same.
    """
    from lightning.fabric.utilities.distributed import _set_num_threads_if_needed

    _set_num_threads_if_needed(num_processes=num_processes)


# --- torch.compile as Lightning re-applies it (lightning_accel.habana._compile_default_backend) ---


def lightning_module_compile_context(model: Any) -> Any | None:
    """The Dynamo context of ``Trainer.fit(torch.compile(model))``, which Lightning keeps on the LightningModule.

    ``None`` when the module was not handed to the Trainer compiled.
    """
    kept = getattr(model, "_compiler_ctx", None)
    return None if kept is None else kept.get("dynamo_ctx")


def wrap_fabric_reapply_compile(rewrite: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> None:
    """Have ``Fabric.setup`` compile a set-up module again with ``rewrite(module, compile_kwargs)``, not the given ones.

    ``Fabric.setup(torch.compile(model))`` takes the compiled module apart, sets the module up and compiles the result
    again with the arguments Lightning captured from ``torch.compile``, in ``lightning.fabric.fabric._to_compiled``.
    Installed once per ``rewrite``; ``rewrite`` returns the arguments unchanged for modules it does not concern.
    """
    import lightning.fabric.fabric as fabric_module

    current = fabric_module._to_compiled
    if getattr(current, "_lightning_accel_rewrite", None) is rewrite:
        return

    def to_compiled(module: Any, compile_kwargs: dict[str, Any]) -> Any:
        return current(module, rewrite(module, compile_kwargs))

    to_compiled._lightning_accel_rewrite = rewrite  # type: ignore[attr-defined]
    fabric_module._to_compiled = to_compiled


# --- Lightning's `fabric run` (lightning_accel.core.fabric_run) ---


def fabric_cli_choices() -> tuple[tuple[str, ...], list[str], tuple[str, ...]]:
    """The choices of Lightning's ``fabric run``: accelerators, strategies, precisions (with their aliases).

    The strategies are those of Fabric's registry that Lightning lets its command launch (the plugins' included once
    they are registered).
    """
    from typing import get_args

    from lightning.fabric.cli import _SUPPORTED_ACCELERATORS, _get_supported_strategies
    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

    precisions = tuple(get_args(_PRECISION_INPUT_STR) + get_args(_PRECISION_INPUT_STR_ALIAS))
    return tuple(_SUPPORTED_ACCELERATORS), list(_get_supported_strategies()), precisions


# --- every private Lightning name the project touches ---

NameKind = Literal["class", "function", "method", "attribute", "instance_attribute"]


@dataclass(frozen=True)
class PrivateName:
    """One private Lightning name that lightning-accel wraps, calls, overrides or reads.

    Attributes:
        owner: Where it lives, written for the ``lightning`` tree: ``"module"`` or ``"module:Class"``
            (e.g. ``"lightning.pytorch.strategies:DeepSpeedStrategy"``); the ``pytorch_lightning`` tree is checked
            under the matching module.
        name: The private name on ``owner`` (``"_choose_strategy"``), or the class / module attribute itself.
        kind: ``"class"``, ``"function"`` (module level), ``"method"`` (also static), ``"attribute"`` (class or
            module attribute, e.g. a type alias) or ``"instance_attribute"`` (set as ``self.<name>`` in a method
            of ``owner`` or its Lightning bases).
        parameters: For functions and methods, the parameter names in order (``None``: not checked).
        use: How the project touches it: ``"wrapped"``, ``"called"``, ``"overridden"``, ``"read"`` (or written),
            ``"imported"``.
        users: The modules that touch it (for the person who has to update them).

    Example:
        >>> name = PrivateName("lightning.fabric.connector:_Connector", "_choose_strategy", "method", ("self",),
        ...                    "wrapped", ("lightning_accel.core.selection",))
        >>> name.qualified("pytorch_lightning")
        'lightning_fabric.connector:_Connector._choose_strategy'
    """

    owner: str
    name: str
    kind: NameKind
    parameters: tuple[str, ...] | None
    use: Literal["wrapped", "called", "overridden", "read", "imported"]
    users: tuple[str, ...]

    def owner_in(self, flavour: Flavour) -> str:
        """``owner`` in the ``flavour`` tree."""
        if flavour == "lightning":
            return self.owner
        for old, new in (("lightning.pytorch", "pytorch_lightning"), ("lightning.fabric", "lightning_fabric")):
            if self.owner == old or self.owner.startswith((old + ".", old + ":")):
                return new + self.owner[len(old) :]
        return self.owner

    def qualified(self, flavour: Flavour = "lightning") -> str:
        """``module:Class.name`` (or ``module.name``) in the ``flavour`` tree, for messages."""
        owner = self.owner_in(flavour)
        return f"{owner}.{self.name}"


_SELECTION = ("lightning_accel.core.selection",)
_TRAINER_CONNECTOR = "lightning.pytorch.trainer.connectors.accelerator_connector:_AcceleratorConnector"
_FABRIC_CONNECTOR = "lightning.fabric.connector:_Connector"
_RANK_WATCH = ("lightning_accel.core.rank_watch",)
_THROUGHPUT = ("lightning_accel.core.throughput",)
_HCCL = ("lightning_accel.habana._hccl_strategy",)
_DEEPSPEED = "lightning.pytorch.strategies:DeepSpeedStrategy"
_DS_USER = ("lightning_accel.deepspeed_hpu.strategy",)


def _connector_names(owner: str, flag_parameters: tuple[str, ...]) -> tuple[PrivateName, ...]:
    module, _, cls = owner.partition(":")
    return (
        PrivateName(module, cls, "class", None, "wrapped", ("lightning_accel.core.compat", *_SELECTION)),
        PrivateName(
            owner, "_check_config_and_set_final_flags", "method", ("self", *flag_parameters), "wrapped", _SELECTION
        ),
        PrivateName(
            owner,
            "_check_device_config_and_set_final_flags",
            "method",
            ("self", "devices", "num_nodes"),
            "wrapped",
            _SELECTION,
        ),
        # A staticmethod in 2.3 to 2.6 (an instance method in 2.1/2.2): the wrap accepts both.
        PrivateName(owner, "_choose_auto_accelerator", "method", (), "wrapped", _SELECTION),
        PrivateName(owner, "_set_parallel_devices_and_init_accelerator", "method", ("self",), "wrapped", _SELECTION),
        PrivateName(owner, "_choose_strategy", "method", ("self",), "wrapped", _SELECTION),
        PrivateName(owner, "_set_devices_flag_if_auto_passed", "method", ("self",), "wrapped", _SELECTION),
        PrivateName(owner, "_check_and_init_precision", "method", ("self",), "wrapped", _SELECTION),
        PrivateName(owner, "_devices_flag", "instance_attribute", None, "read", _SELECTION),
        PrivateName(module, "_IS_INTERACTIVE", "attribute", None, "read", ("lightning_accel.core.compat",)),
        PrivateName(module, "rank_zero_info", "function", None, "called", ("lightning_accel.core.compat",)),
        PrivateName(owner, "_accelerator_flag", "instance_attribute", None, "read", _SELECTION),
        PrivateName(owner, "_strategy_flag", "instance_attribute", None, "read", _SELECTION),
        PrivateName(owner, "_num_nodes_flag", "instance_attribute", None, "read", _SELECTION),
        PrivateName(owner, "_parallel_devices", "instance_attribute", None, "read", _SELECTION),
    )


# fmt: off
PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # The core: selection wraps, the start-up lines, the process-group helper.
    *_connector_names(_TRAINER_CONNECTOR, ("strategy", "accelerator", "precision", "plugins", "sync_batchnorm")),
    *_connector_names(_FABRIC_CONNECTOR, ("strategy", "accelerator", "precision", "plugins")),
    PrivateName(_TRAINER_CONNECTOR, "_precision_flag", "instance_attribute", None, "read", _SELECTION),
    PrivateName(_FABRIC_CONNECTOR, "_precision_input", "instance_attribute", None, "read", _SELECTION),
    PrivateName("lightning.pytorch.trainer.setup", "_log_device_info", "function", ("trainer",), "wrapped",
                _SELECTION),
    PrivateName("lightning.fabric.utilities.distributed", "_init_dist_connection", "function",
                ("cluster_environment", "torch_distributed_backend", "global_rank", "world_size", "kwargs"), "called",
                ("lightning_accel.core.compat", *_HCCL)),
    # The rank watchers (core.rank_watch): Lightning's subprocess launchers, with the observer replaced.
    *(
        name
        for tree in ("pytorch", "fabric")
        for name in (
            PrivateName(f"lightning.{tree}.strategies.launchers.subprocess_script", "_SubprocessScriptLauncher",
                        "class", None, "overridden", _RANK_WATCH),
            PrivateName(f"lightning.{tree}.strategies.launchers.subprocess_script:_SubprocessScriptLauncher",
                        "_call_children_scripts", "method", ("self",), "called", _RANK_WATCH),
            PrivateName(f"lightning.{tree}.strategies:DDPStrategy", "_configure_launcher", "method", ("self",),
                        "overridden", _HCCL),
            PrivateName(f"lightning.{tree}.strategies:DDPStrategy", "_launcher", "instance_attribute", None, "read",
                        _HCCL),
        )
    ),
    PrivateName("lightning.pytorch.overrides.distributed", "_register_ddp_comm_hook", "function",
                ("model", "ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper"), "called",
                ("lightning_accel.core.compat",)),
    PrivateName("lightning.pytorch.strategies:DDPStrategy", "_register_ddp_hooks", "method", ("self",), "overridden",
                ("lightning_accel.habana.strategies.parallel",)),
    *(PrivateName("lightning.pytorch.strategies:DDPStrategy", name, "instance_attribute", None, "read",
                  ("lightning_accel.habana.strategies.parallel",))
      for name in ("_ddp_comm_state", "_ddp_comm_hook", "_ddp_comm_wrapper")),
    PrivateName("lightning.fabric.utilities.distributed", "_set_num_threads_if_needed", "function",
                ("num_processes",), "called", ("lightning_accel.core.compat", *_RANK_WATCH)),
    # MFU (core.throughput): the peak-FLOPs lookup and the compute dtype, in the two throughput modules (the
    # Trainer callback's module binds its own get_available_flops at import, so that binding is wrapped there).
    *(
        name
        for module in ("lightning.fabric.utilities.throughput", "lightning.pytorch.callbacks.throughput_monitor")
        for name in (
            PrivateName(module, "get_available_flops", "function", ("device", "dtype"), "wrapped", _THROUGHPUT),
            PrivateName(module, "_plugin_to_compute_dtype", "function", ("plugin",), "wrapped", _THROUGHPUT),
        )
    ),
    # Types used in vendor annotations.
    PrivateName("lightning.fabric.accelerators.registry", "_AcceleratorRegistry", "class", None, "imported",
                ("lightning_accel.habana.accelerator", "lightning_accel.habana.fabric.accelerator")),
    PrivateName("lightning.fabric.utilities.types", "_PATH", "attribute", None, "imported", _DS_USER),
    # habana: strategies' defaults for precision and checkpoint IO, the HCCL process group, device mapping.
    PrivateName("lightning.pytorch.strategies:Strategy", "_precision_plugin", "instance_attribute", None, "read",
                ("lightning_accel.habana.strategies", *_DS_USER)),
    PrivateName("lightning.pytorch.strategies:Strategy", "_checkpoint_io", "instance_attribute", None, "read",
                ("lightning_accel.habana._strategy_defaults",)),
    PrivateName("lightning.fabric.strategies:Strategy", "_precision", "instance_attribute", None, "read",
                ("lightning_accel.habana.fabric.strategies",)),
    PrivateName("lightning.fabric.strategies:Strategy", "_checkpoint_io", "instance_attribute", None, "read",
                ("lightning_accel.habana._strategy_defaults",)),
    # Fabric's no_backward_sync asks the strategy's control; fast_ddp sets its own (it has no DDP module to ask).
    PrivateName("lightning.fabric.strategies:Strategy", "_backward_sync_control", "instance_attribute", None, "read",
                ("lightning_accel.habana.fabric.fast_ddp",)),
    PrivateName("lightning.pytorch.strategies:SingleDeviceStrategy", "_root_device", "instance_attribute", None,
                "read", ("lightning_accel.habana.strategies.single",)),
    PrivateName("lightning.fabric.strategies:SingleDeviceStrategy", "_root_device", "instance_attribute", None,
                "read", ("lightning_accel.habana.fabric.strategies",)),
    PrivateName("lightning.pytorch.strategies:DDPStrategy", "_get_process_group_backend", "method", ("self",),
                "called", _HCCL),
    PrivateName("lightning.pytorch.strategies:DDPStrategy", "_process_group_backend", "instance_attribute", None,
                "read", _HCCL),
    PrivateName("lightning.pytorch.strategies:DDPStrategy", "_timeout", "instance_attribute", None, "read", _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_get_process_group_backend", "method", ("self",),
                "called", _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_set_world_ranks", "method", ("self",), "called", _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_setup_distributed", "method", ("self",), "overridden",
                _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_determine_ddp_device_ids", "method", ("self",),
                "overridden", _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_process_group_backend", "instance_attribute", None,
                "read", _HCCL),
    PrivateName("lightning.fabric.strategies:DDPStrategy", "_timeout", "instance_attribute", None, "read", _HCCL),
    # Lightning's ModelParallelStrategy on HPUs: its arguments read back, and its join of the process group replaced.
    *(
        PrivateName(f"lightning.{tree}.strategies:ModelParallelStrategy", name, "instance_attribute", None, "read",
                    ("lightning_accel.habana._from_lightning",))
        for tree in ("pytorch", "fabric")
        for name in ("_data_parallel_size", "_tensor_parallel_size", "_save_distributed_checkpoint")
    ),
    PrivateName("lightning.fabric.strategies:ModelParallelStrategy", "_parallelize_fn", "instance_attribute", None,
                "read", ("lightning_accel.habana._from_lightning",)),
    PrivateName("lightning.pytorch.strategies:ModelParallelStrategy", "_setup_distributed", "method", ("self",),
                "overridden", ("lightning_accel.habana.strategies.model_parallel",)),
    PrivateName("lightning.fabric.strategies:ModelParallelStrategy", "_setup_distributed", "method", ("self",),
                "overridden", ("lightning_accel.habana.fabric.model_parallel", *_HCCL)),
    PrivateName("lightning.fabric.strategies:ModelParallelStrategy", "_set_world_ranks", "method", ("self",),
                "called", _HCCL),
    # Lightning's strategy instances rebuilt as the HPU strategy with the arguments their __init__ stored.
    *(
        PrivateName(f"lightning.{tree}.strategies:{owner}", name, "instance_attribute", None, "read",
                    ("lightning_accel.habana._from_lightning", "lightning_accel.deepspeed_hpu.strategy"))
        for tree in ("pytorch", "fabric")
        for owner, name in (("Strategy", "_accelerator"), ("DDPStrategy", "_start_method"),
                            ("DDPStrategy", "_ddp_kwargs"))
    ),
    *(
        PrivateName(f"lightning.{tree}.strategies:FSDPStrategy", "_activation_checkpointing_kwargs",
                    "instance_attribute", None, "read", ("lightning_accel.habana._from_lightning",))
        for tree in ("pytorch", "fabric")
    ),
    # Lightning's FSDP constructor stores state_dict_type here; the HPU strategies' property checks what it stores.
    *(
        PrivateName(f"lightning.{tree}.strategies:FSDPStrategy", "_state_dict_type", "instance_attribute", None,
                    "overridden", ("lightning_accel.habana._from_lightning", "lightning_accel.habana._fsdp_strategy"))
        for tree in ("pytorch", "fabric")
    ),
    PrivateName("lightning.pytorch.strategies:DDPStrategy", "_model_averaging_period", "instance_attribute", None,
                "read", ("lightning_accel.habana._from_lightning",)),
    # Lightning reverts sync_batchnorm's layers at teardown; under FSDP that breaks a later stage of the Trainer.
    PrivateName("lightning.pytorch.strategies:ParallelStrategy", "_layer_sync", "instance_attribute", None, "read",
                ("lightning_accel.habana.strategies.fsdp",)),
    PrivateName("lightning.pytorch.strategies:FSDPStrategy", "_setup_model", "method", ("self", "model"), "overridden",
                ("lightning_accel.habana.strategies.fsdp",)),
    # Fabric's FSDP keeps its FullyShardedDataParallel arguments here; the HPU strategy builds a tuple's mesh in it.
    PrivateName("lightning.fabric.strategies:FSDPStrategy", "_fsdp_kwargs", "instance_attribute", None, "read",
                ("lightning_accel.habana.fabric.fsdp",)),
    PrivateName("lightning.pytorch.core.module:LightningModule", "_compiler_ctx", "instance_attribute", None, "read",
                ("lightning_accel.habana.graphs", "lightning_accel.core.compat")),
    # `lightning-accel fabric run` offers Lightning's choices, plus the plugins' accelerators.
    PrivateName("lightning.fabric.cli", "_SUPPORTED_ACCELERATORS", "attribute", None, "read",
                ("lightning_accel.core.compat",)),
    PrivateName("lightning.fabric.cli", "_get_supported_strategies", "function", (), "called",
                ("lightning_accel.core.compat",)),
    *(PrivateName("lightning.fabric.plugins.precision.precision", name, "attribute", None, "read",
                  ("lightning_accel.core.compat",)) for name in ("_PRECISION_INPUT_STR", "_PRECISION_INPUT_STR_ALIAS")),
    # torch.compile on HPUs: Fabric compiles a set-up module again here; the HPU strategies swap Inductor for
    # hpu_backend (lightning_accel.habana._compile_default_backend).
    PrivateName("lightning.fabric.fabric", "_to_compiled", "function", ("module", "compile_kwargs"), "wrapped",
                ("lightning_accel.core.compat",)),
    # Lightning's test for an out-of-memory error, where it is defined and where the batch-size finder binds it:
    # wrapped to recognise Gaudi's device out-of-memory error as well.
    *(PrivateName(module, "is_oom_error", "function", ("exception",), "wrapped", ("lightning_accel.habana._oom",))
      for module in ("lightning.pytorch.utilities.memory", "lightning.pytorch.tuner.batch_size_scaling")),
    PrivateName("lightning.pytorch.profilers:PyTorchProfiler", "_create_profilers", "method", ("self",),
                "overridden", ("lightning_accel.habana.profiler",)),
    PrivateName("lightning.pytorch.profilers:PyTorchProfiler", "_profiler_kwargs", "instance_attribute", None, "read",
                ("lightning_accel.habana.profiler",)),
    PrivateName("lightning.pytorch.profilers:PyTorchProfiler", "_default_activities", "method", ("self",), "called",
                ("lightning_accel.habana.profiler",)),
    # graphcore
    PrivateName("lightning.pytorch.plugins.precision:Precision", "_after_closure", "method",
                ("self", "model", "optimizer"), "called", ("lightning_accel.graphcore.precision",)),
    # deepspeed-hpu: Lightning's DeepSpeedStrategy, with its three fixes off CUDA.
    PrivateName(_DEEPSPEED, "_load_config", "method", ("self", "config"), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_format_config", "method", ("self",), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_auto_select_batch_size", "method", ("self",), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_init_deepspeed_distributed", "method", ("self",), "called", _DS_USER),
    PrivateName(_DEEPSPEED, "_init_optimizers", "method", ("self",), "called", _DS_USER),
    PrivateName(_DEEPSPEED, "_initialize_deepspeed_train", "method", ("self", "model"), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_initialize_deepspeed_inference", "method", ("self", "model"), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_set_deepspeed_activation_checkpointing", "method", ("self",), "overridden", _DS_USER),
    PrivateName(_DEEPSPEED, "_setup_model_and_optimizer", "method", ("self", "model", "optimizer", "lr_scheduler"),
                "overridden", _DS_USER),
    # Fabric's DeepSpeedStrategy.setup_environment formats its config once; the HPU one repeats that step.
    PrivateName("lightning.fabric.strategies:DeepSpeedStrategy", "_config_initialized", "instance_attribute", None,
                "read", ("lightning_accel.deepspeed_hpu.fabric",)),
    PrivateName("lightning.pytorch.plugins.precision:DeepSpeedPrecision", "_desired_dtype", "instance_attribute",
                None, "read", ("lightning_accel.deepspeed_hpu.precision",)),
    PrivateName("lightning.pytorch.core.module:LightningModule", "_trainer", "instance_attribute", None, "read",
                (*_DS_USER, "lightning_accel.habana._accelerator_check")),
)
# fmt: on


def _stored_attributes(cls: type) -> set[str]:
    """Names stored as ``self.<name>`` (or any attribute store) by the functions of ``cls`` and its bases."""
    import dis
    import inspect

    names: set[str] = set()
    for klass in cls.__mro__:
        for value in vars(klass).values():
            function = getattr(value, "fset", None) or getattr(value, "__func__", value)
            # The core's wraps of a connector's methods keep Lightning's method in __wrapped__: look at Lightning's.
            function = inspect.unwrap(function) if callable(function) else function
            code = getattr(function, "__code__", None)
            if code is None:
                continue
            names.update(i.argval for i in dis.get_instructions(code) if i.opname == "STORE_ATTR")
        # Annotated class-level declarations (`_precision: Precision | None`) count as declared too.
        names.update(getattr(klass, "__annotations__", {}))
    return names


def check_private_name(declared: PrivateName, flavour: Flavour = "lightning") -> str | None:
    """Check one declaration against the installed Lightning's ``flavour`` tree.

    Returns:
        ``None`` when the name is where it was declared, with its kind and parameters; otherwise a sentence naming
        the name and what differs.
    """
    import inspect

    owner = declared.owner_in(flavour)
    module_name, _, class_name = owner.partition(":")
    where = f"{owner}.{declared.name}"
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        return f"{where}: module {module_name!r} cannot be imported ({exc})"
    if class_name:
        target = getattr(target, class_name, None)
        if not isinstance(target, type):
            return f"{where}: class {class_name!r} no longer exists in {module_name}"
    if declared.kind == "instance_attribute":
        if declared.name not in _stored_attributes(target) and not hasattr(target, declared.name):
            return f"{where}: {class_name} (and its bases) no longer sets the attribute {declared.name!r}"
        return None
    if not hasattr(target, declared.name):
        return f"{where}: no longer exists"
    value = getattr(target, declared.name)
    if declared.kind == "class" and not isinstance(value, type):
        return f"{where}: is now a {type(value).__name__}, not a class"
    if declared.kind in ("function", "method"):
        if not callable(value):
            return f"{where}: is now a {type(value).__name__}, not callable"
        if declared.parameters is not None:
            # The core's wraps keep the original in __wrapped__, which inspect.signature follows.
            found = tuple(inspect.signature(value).parameters)
            if found != declared.parameters:
                return f"{where}: parameters are now {found}, declared {declared.parameters}"
    return None
