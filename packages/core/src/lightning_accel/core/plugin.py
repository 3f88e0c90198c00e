"""The plugin protocol: what a vendor distribution declares to the core.

A vendor distribution declares one entry point in the group ``lightning_accel.plugins`` that resolves to a
:class:`PluginSpec`. Loading it must be cheap: the spec names its classes by import path (``"module:Class"``) and the
core imports them only when it registers them into an imported Lightning tree.

Example:
    .. code-block:: python

        # my_vendor/plugin.py, declared in pyproject.toml as
        # [project.entry-points."lightning_accel.plugins"]
        # myvendor = "my_vendor.plugin:PLUGIN"
        from lightning_accel.core import AcceleratorSpec, PluginSpec, StrategySpec

        PLUGIN = PluginSpec(
            name="myvendor",
            distribution="my-vendor",
            accelerators=(
                AcceleratorSpec(
                    name="xpu9",
                    trainer="my_vendor.accelerator:XPU9Accelerator",
                    fabric="my_vendor.fabric:XPU9Accelerator",
                    description="The XPU9 card",
                    single_strategy="xpu9_single",
                    parallel_strategy="xpu9_ddp",
                ),
            ),
            strategies=(
                StrategySpec("xpu9_single", "my_vendor.strategies:SingleXPU9", "my_vendor.fabric:SingleXPU9"),
                StrategySpec("xpu9_ddp", "my_vendor.strategies:XPU9DDP", "my_vendor.fabric:XPU9DDP"),
            ),
            availability="my_vendor.plugin:availability",
        )
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "ENTRY_POINT_GROUP",
    "AcceleratorSpec",
    "Availability",
    "PluginSpec",
    "StrategySpec",
    "import_target",
]

ENTRY_POINT_GROUP = "lightning_accel.plugins"

AvailabilityState = Literal["hardware", "emulated", "unavailable"]


@dataclass(frozen=True)
class Availability:
    """Whether a plugin's devices can be used in this process, and why.

    Attributes:
        state: ``"hardware"`` (the real device and SDK are present), ``"emulated"`` (the software emulator is
            switched on) or ``"unavailable"``.
        reason: A sentence for users: what was found, or what is missing and how to fix it.
        devices: How many devices are visible (0 when unavailable).
    """

    state: AvailabilityState
    reason: str
    devices: int = 0

    @property
    def usable(self) -> bool:
        """Whether training can run on these devices (on hardware or emulated)."""
        return self.state != "unavailable"


@dataclass(frozen=True)
class StrategySpec:
    """A strategy a plugin registers under a name.

    Attributes:
        name: The string users pass as ``strategy=``.
        trainer: ``"module:Class"`` of the Trainer strategy (subclass of ``lightning.pytorch`` ``Strategy``), or
            ``None`` when the strategy exists only for Fabric.
        fabric: ``"module:Class"`` of the Fabric strategy, or ``None`` when it exists only for the Trainer.
        description: One line shown by ``lightning-accel list``.
        init_params: Keyword arguments the registry passes to the class when the name is used.
        accelerator: The accelerator name the strategy runs on, when it is not the plugin's own (a strategy-only
            plugin such as DeepSpeed on Gaudi names ``"hpu"``); ``accelerator="auto"`` with this strategy then picks
            it. ``None`` means the plugin's own accelerator.
        replaces: The name of the Lightning strategy class this strategy stands for on its accelerator (e.g.
            ``"DDPStrategy"``): with that accelerator, each of Lightning's names registered for that class
            (``strategy="ddp"``, ``"ddp_spawn"``, ``"ddp_find_unused_parameters_true"`` ...) selects this strategy,
            built with the arguments Lightning's name stands for. An instance of that class is converted by the
            strategy class's ``from_lightning_strategy(instance)`` classmethod when it has one (refused, naming
            this strategy, when not). Empty: none.
    """

    name: str
    trainer: str | None
    fabric: str | None = None
    description: str = ""
    init_params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    accelerator: str | None = None
    replaces: str = ""


@dataclass(frozen=True)
class AcceleratorSpec:
    """An accelerator a plugin registers, and how the core picks its default strategy.

    Attributes:
        name: The string users pass as ``accelerator=`` (also the device type, e.g. ``"hpu"``).
        trainer: ``"module:Class"`` of the Trainer accelerator.
        fabric: ``"module:Class"`` of the Fabric accelerator, or ``None``.
        description: One line shown by ``lightning-accel list``.
        single_strategy: Registered strategy name used for one device on one node.
        parallel_strategy: Registered strategy name used for several devices or nodes.
        peak_flops: ``"module:function"`` giving the device's peak FLOPs per second for a compute dtype, called as
            ``function(device: torch.device, dtype: torch.dtype) -> int | None`` (``None``: no published number);
            Lightning's ``ThroughputMonitor`` divides by it to report MFU (see :mod:`lightning_accel.core.throughput`).
            Empty: the core reports no MFU for this accelerator.
        refused_precisions: Lightning ``precision=`` strings this accelerator does not run, each mapped to why and
            what to use instead. The connector refuses them with that text before Lightning builds its precision
            plugin (whose own error would ask to install a CUDA library).
    """

    name: str
    trainer: str
    fabric: str | None
    description: str
    single_strategy: str
    parallel_strategy: str
    peak_flops: str = ""
    refused_precisions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class PluginSpec:
    """Everything the core needs to know about a vendor distribution, without importing it.

    Attributes:
        name: Short name used by ``LIGHTNING_ACCEL_DISABLE`` and ``lightning-accel list`` (e.g. ``"habana"``).
        distribution: The distribution that provides the plugin (e.g. ``"lightning-accel-habana"``).
        accelerators: The accelerators it registers.
        strategies: The strategies it registers.
        availability: ``"module:function"`` returning an :class:`Availability`; must not import Lightning and
            must be cheap enough to call when the Trainer resolves ``accelerator="auto"``.
        emulates: Device types this plugin can emulate (accepted values of ``LIGHTNING_ACCEL_EMULATE``).
        precision: Precision strings the plugin's strategies accept, mapped to a one-line description.
        supports_pytorch_lightning: Whether the core may build twins of the classes for the ``pytorch_lightning``
            / ``lightning_fabric`` trees (the classes must import Lightning only as ``lightning.pytorch`` /
            ``lightning.fabric`` and their own package with relative imports).
        lightning: The Lightning versions the plugin supports, a PEP 440 specifier such as ``">=2.6,<2.7"``; empty
            means every version the core supports. A plugin whose range excludes the installed Lightning is not
            registered, with a warning naming the plugin, the installed version and the range.
        selftest: ``"module:attribute"`` naming a sequence of :class:`lightning_accel.core.selftest.Check` that
            ``lightning-accel selftest`` runs for this plugin; empty for none. The module must be as cheap to import
            as the spec itself (the checks name their functions by import path too).
        preflight: ``"module:function"`` that ``lightning-accel preflight`` calls with its remaining arguments
            (``function(argv: list[str]) -> int``, the exit status) to check a model for this plugin's devices; empty
            for none. Imported only by ``preflight``.
        environment: ``"module:function"`` returning a mapping of label to one line of text that ``lightning-accel
            env`` prints under the plugin's name (for example whether the installed versions were validated
            together); empty for none. Called only by ``env``; one that raises is printed as its error.
    """

    name: str
    distribution: str
    accelerators: tuple[AcceleratorSpec, ...]
    strategies: tuple[StrategySpec, ...]
    availability: str
    emulates: tuple[str, ...] = ()
    precision: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    supports_pytorch_lightning: bool = True
    lightning: str = ""
    selftest: str = ""
    preflight: str = ""
    environment: str = ""

    def __post_init__(self) -> None:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(self.lightning)
        except InvalidSpecifier:
            raise ValueError(
                f"PluginSpec(name={self.name!r}, lightning={self.lightning!r}): not a version specifier. Accepted: "
                "a PEP 440 specifier such as '>=2.6,<2.7', or '' for every Lightning the core supports."
            ) from None

    def supports_lightning(self, installed: str) -> bool:
        """Whether the plugin declares support for Lightning ``installed`` (pre-releases count as their release)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        return SpecifierSet(self.lightning).contains(Version(installed).base_version, prereleases=True)

    def check_availability(self) -> Availability:
        """Call the plugin's availability function; one that raises reports ``"unavailable"`` with its error.

        A broken vendor stack (an SDK that raises ``OSError`` or ``AssertionError`` while it loads) must come out as a
        reason, in ``Trainer(...)``'s start-up lines and ``lightning-accel list`` alike, never as a traceback there.
        """
        try:
            func: Callable[[], Availability] = import_target(self.availability)
            return func()
        except Exception as exc:
            return Availability("unavailable", f"availability check failed: {type(exc).__name__}: {exc}")

    def accelerator(self, name: str) -> AcceleratorSpec | None:
        """The accelerator called ``name``, or ``None``."""
        return next((acc for acc in self.accelerators if acc.name == name), None)


def import_target(target: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute.

    Raises:
        ValueError: When ``target`` is not of the form ``module:attribute``.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"Import target {target!r} must have the form 'package.module:attribute'.")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj
