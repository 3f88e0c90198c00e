"""Accelerator and strategy selection for vendor accelerators, wrapped around Lightning's connectors.

Lightning 2.6's connectors know only cpu, cuda, mps and xla: for ``accelerator="hpu"`` with ``strategy="auto"`` the
Trainer raises "HPU is currently not supported", and for any other registered name it silently picks a CPU
strategy. The core wraps eight methods of the Trainer's and Fabric's connector classes. For a vendor accelerator
(given as a name or an instance) the wrap asks the vendor plugin; everything else reaches Lightning's own code
unchanged:

- ``_check_config_and_set_final_flags``: a name that one of lightning-accel's own distributions provides, asked
  for while that distribution is not installed (or disabled), fails with what to install instead of Lightning's
  bare "invalid name".
- ``_set_parallel_devices_and_init_accelerator``: a vendor accelerator that is neither on hardware nor emulated
  fails with the plugin's reason (which says how to turn emulation on), not Lightning's generic message. With a
  vendor accelerator (named, or chosen by ``"auto"``), Lightning's own strategy names (``"ddp"``, ``"ddp_spawn"``,
  ``"fsdp"``, ``"deepspeed_stage_2"`` ...) select the vendor strategy that declares it replaces their class
  (:attr:`~lightning_accel.core.plugin.StrategySpec.replaces`), built with the arguments the name stands for. An
  instance of Lightning's class becomes the vendor strategy with the same arguments when the vendor class offers a
  ``from_lightning_strategy(instance)`` classmethod; otherwise it is refused before launch, naming the vendor's
  equivalent, as is a Lightning strategy with no such counterpart.
- ``_check_device_config_and_set_final_flags``: ``devices=0`` (or ``"0"``, ``[]``) with a vendor accelerator fails
  with what is accepted and the fix (Lightning's message names neither).
- ``_choose_auto_accelerator``: ``accelerator="auto"`` picks a vendor only when its real hardware is present, or
  when ``strategy=`` names one of the vendor's strategies and the vendor is usable (hardware or emulated).
- ``_set_devices_flag_if_auto_passed``: in a notebook (Lightning's ``_IS_INTERACTIVE``), ``devices="auto"`` with a
  vendor accelerator takes one device, as Lightning does for CUDA.
- ``_check_and_init_precision``: Lightning builds its precision plugin (the vendor strategy swaps it for its own).
  With a vendor accelerator, a precision the accelerator declares it does not run
  (:attr:`~lightning_accel.core.plugin.AcceleratorSpec.refused_precisions`) is refused first with its reason, and
  torch's warning that the CUDA loss scaler Lightning builds for ``"16-mixed"`` under FSDP is disabled without CUDA
  is not shown, since the vendor plugin scales the loss instead (Lightning silences the same warning for its other
  ``"16-mixed"`` plugin).
- ``_choose_strategy``: one device on one node gets the plugin's single-device strategy, otherwise its parallel
  strategy; in a notebook, the vendor's replacement of Lightning's ``DDPStrategy`` started by fork, as Lightning
  picks ``"ddp_fork"`` for CUDA.

The wrap is idempotent and version-guarded: outside the tested Lightning range a vendor accelerator is refused with
a clear message and nothing else changes.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from lightning_accel.core.catalogue import KnownName, known_accelerator, known_strategy
from lightning_accel.core.compat import (
    Tree,
    check_lightning_version,
    connector_class,
    device_info_module,
    is_interactive,
    log_as_connector,
    registries,
)
from lightning_accel.core.crosstree import to_tree
from lightning_accel.core.discovery import DISABLE_VAR, disabled_names, discovered_plugins
from lightning_accel.core.errors import ConfigurationError, DeviceUnavailableError
from lightning_accel.core.registration import (
    VendorAccelerator,
    lightning_equivalents,
    strategy_accelerators,
    vendor_accelerators,
)

__all__ = ["device_info_lines", "install_selection", "is_wrapped"]

_MARK = "__lightning_accel_original__"


def _original(cls: type, name: str) -> Callable[..., Any]:
    current = cls.__dict__[name]
    function = current.__func__ if isinstance(current, staticmethod) else current
    original: Callable[..., Any] = getattr(function, _MARK, function)
    return original


def _mark(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, _MARK, original)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = original.__name__
    wrapper.__qualname__ = original.__qualname__
    wrapper.__doc__ = original.__doc__
    return wrapper


def is_wrapped(tree: Tree) -> bool:
    """Whether the connector of ``tree`` carries the lightning-accel selection wrap."""
    cls = connector_class(tree)
    return hasattr(cls.__dict__["_choose_strategy"], _MARK)


def _vendor_for(tree: Tree, accelerator: object) -> VendorAccelerator | None:
    return next((vendor for vendor in vendor_accelerators(tree) if vendor.owns(accelerator)), None)


def _vendor_for_strategy(tree: Tree, strategy: object) -> VendorAccelerator | None:
    """The vendor accelerator a strategy (name or instance) runs on, whichever plugin registered the strategy."""
    for name, (accelerator, entry) in strategy_accelerators(tree).items():
        if strategy == name:
            return _vendor_for(tree, accelerator)
        cls = entry.loaded_class()
        if cls is not None and isinstance(strategy, cls):
            return _vendor_for(tree, accelerator)
    return None


def _require_usable(tree: Tree, vendor: VendorAccelerator) -> None:
    check_lightning_version(tree)
    availability = vendor.plugin.spec.check_availability()
    if not availability.usable:
        raise DeviceUnavailableError(
            f"accelerator={vendor.spec.name!r} cannot run here: {availability.reason} "
            f"(plugin {vendor.plugin.distribution} {vendor.plugin.version})"
        )


def _missing(argument: str, value: str, known: KnownName, installed: list[str]) -> ConfigurationError:
    plugin = next((p for p in discovered_plugins() if p.distribution == known.distribution), None)
    if plugin is not None:
        names = [a.name for a in plugin.spec.accelerators] if argument == "accelerator" else []
        names = names or [s.name for s in plugin.spec.strategies]
        return ConfigurationError(
            f"{argument}={value!r} is not a name {known.distribution} {plugin.version} provides. Its {argument} "
            f"names: {', '.join(sorted(names)) or '(none)'}. Run `lightning-accel list` to see every installed name."
        )
    if known.plugin in disabled_names():
        fix = f"it is disabled by {DISABLE_VAR}; remove {known.plugin!r} from that variable"
    else:
        fix = f"install it with `pip install 'lightning-accel[{known.extra}]'`"
    return ConfigurationError(
        f"{argument}={value!r} is provided by {known.distribution}, which is not active: {fix}. "
        f"Installed {argument} names: {', '.join(sorted(installed))}."
    )


# Positions of the arguments of `_check_config_and_set_final_flags` (after self) that may hold vendor objects.
_FLAG_POSITIONS = {"strategy": 0, "accelerator": 1, "plugins": 3}


def _same_tree_flags(
    tree: Tree, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with vendor objects of the other tree transplanted into ``tree`` (see :mod:`.crosstree`)."""
    memo: dict[int, Any] = {}
    positional = list(args)
    for name, position in _FLAG_POSITIONS.items():
        if name in kwargs:
            value = kwargs[name]
        elif position < len(positional):
            value = positional[position]
        else:
            continue
        if name == "plugins" and isinstance(value, (list, tuple)):
            converted: Any = type(value)(to_tree(item, tree.flavour, name, memo) for item in value)
        else:
            converted = to_tree(value, tree.flavour, name, memo)
        if name in kwargs:
            kwargs[name] = converted
        else:
            positional[position] = converted
    return tuple(positional), kwargs


def _wrap_check_flags(tree: Tree, cls: type) -> None:
    original = _original(cls, "_check_config_and_set_final_flags")
    accelerator_registry, strategy_registry = registries(tree)

    def _check_config_and_set_final_flags(self: Any, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _same_tree_flags(tree, args, dict(kwargs))
        strategy = kwargs.get("strategy", args[0] if args else None)
        accelerator = kwargs.get("accelerator", args[1] if len(args) > 1 else None)
        if isinstance(accelerator, str) and accelerator.lower() not in accelerator_registry:
            known = known_accelerator(accelerator.lower())
            if known is not None:
                raise _missing("accelerator", accelerator, known, ["auto", *accelerator_registry])
        if isinstance(strategy, str) and strategy.lower() not in strategy_registry:
            known = known_strategy(strategy.lower())
            if known is not None:
                raise _missing("strategy", strategy, known, ["auto", *strategy_registry])
        original(self, *args, **kwargs)

    cls._check_config_and_set_final_flags = _mark(_check_config_and_set_final_flags, original)  # type: ignore[attr-defined]


_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


def _is_lightnings(cls: Any) -> bool:
    return isinstance(cls, type) and cls.__module__.split(".")[0] in _LIGHTNING_ROOTS


def _lightning_names(strategy_registry: Any, class_names: set[str]) -> list[str]:
    """Lightning's own registered strategy names whose class is one of ``class_names``."""
    return sorted(
        name
        for name, entry in strategy_registry.items()
        if _is_lightnings(entry["strategy"]) and entry["strategy"].__name__ in class_names
    )


def _use_vendor_equivalent(tree: Tree, connector: Any) -> None:
    """With a vendor accelerator, turn Lightning's strategy names into the vendor strategies that replace them."""
    vendor = _vendor_for(tree, connector._accelerator_flag)
    flag = connector._strategy_flag
    if vendor is None or flag is None or flag == "auto":
        return
    accelerator = vendor.spec.name
    _, strategy_registry = registries(tree)
    equivalents = {
        lightning: found
        for (runs_on, lightning), found in lightning_equivalents(tree).items()
        if runs_on == accelerator
    }
    if isinstance(flag, str):
        if flag in strategy_accelerators(tree) or flag not in strategy_registry:
            return
        entry = strategy_registry[flag]
        lightning_class = entry["strategy"]
        if not _is_lightnings(lightning_class):
            return
        equivalent = equivalents.get(lightning_class.__name__)
        if equivalent is None:
            vendor_names = sorted(
                n for n, (runs_on, _) in strategy_accelerators(tree).items() if runs_on == accelerator
            )
            raise ConfigurationError(
                f"strategy={flag!r} is Lightning's {lightning_class.__name__}, which has no counterpart on "
                f"accelerator={accelerator!r}. Accepted with it: Lightning's names "
                f"{', '.join(map(repr, _lightning_names(strategy_registry, set(equivalents))))}, or the "
                f"{accelerator.upper()} strategies {', '.join(map(repr, vendor_names))}."
            )
        name, vendor_class = equivalent
        params = {**dict(strategy_registry[name]["init_params"]), **dict(entry["init_params"])}
        connector._strategy_flag = vendor_class(**params)
        return
    lightning_class = type(flag)
    equivalent = equivalents.get(lightning_class.__name__)
    if _is_lightnings(lightning_class) and equivalent is not None:
        name, vendor_class = equivalent
        target = vendor_class.load()
        convert = getattr(target, "from_lightning_strategy", None)
        if callable(convert):
            connector._strategy_flag = convert(flag)
            return
        aliases = _lightning_names(strategy_registry, {lightning_class.__name__})
        raise ConfigurationError(
            f"strategy={lightning_class.__name__}(...) is Lightning's strategy for its own devices and does not run "
            f"on accelerator={accelerator!r}. Pass {target.__name__}(...) from {target.__module__} with the same "
            f"arguments, or a name: {', '.join(map(repr, [name, *aliases]))}."
        )


def _wrap_check_devices(tree: Tree, cls: type) -> None:
    original = _original(cls, "_check_device_config_and_set_final_flags")
    entry = "Trainer" if tree.kind == "pytorch" else "Fabric"

    def _check_device_config_and_set_final_flags(self: Any, *args: Any, **kwargs: Any) -> None:
        devices = kwargs.get("devices", args[0] if args else None)
        vendor = _vendor_for(tree, self._accelerator_flag)
        if vendor is not None and (devices == [] or (devices in (0, "0") and not isinstance(devices, bool))):
            name = vendor.spec.name
            raise ConfigurationError(
                f"{entry}(devices={devices!r}) is not accepted with accelerator={name!r}: it needs at least one "
                f"{name.upper()}. Accepted: a positive int (e.g. devices=1), -1 for every visible {name.upper()}, or "
                f"'auto'. To run on the CPU instead, pass accelerator='cpu'."
            )
        original(self, *args, **kwargs)

    cls._check_device_config_and_set_final_flags = _mark(  # type: ignore[attr-defined]
        _check_device_config_and_set_final_flags, original
    )


def _wrap_choose_auto_accelerator(tree: Tree, cls: type) -> None:
    original = _original(cls, "_choose_auto_accelerator")
    takes_connector = 1 if inspect.signature(original).parameters else 0

    # Lightning declares it a staticmethod but always calls it on the instance; a plain function gets that
    # instance (to see the strategy flag) and still works when called on the class.
    def _choose_auto_accelerator(*args: Any) -> str:
        connector = args[0] if args else None
        strategy_flag = getattr(connector, "_strategy_flag", None)
        chosen = _vendor_for_strategy(tree, strategy_flag) if strategy_flag not in (None, "auto") else None
        if chosen is not None and chosen.plugin.spec.check_availability().usable:
            return chosen.spec.name
        for vendor in vendor_accelerators(tree):
            if vendor.plugin.spec.check_availability().state == "hardware":
                return vendor.spec.name
        # A staticmethod in Lightning 2.3 to 2.6, an instance method before: pass the connector only if it takes it.
        result: str = original(*args[:takes_connector])
        return result

    cls._choose_auto_accelerator = _mark(_choose_auto_accelerator, original)  # type: ignore[attr-defined]


def _wrap_init_accelerator(tree: Tree, cls: type) -> None:
    original = _original(cls, "_set_parallel_devices_and_init_accelerator")

    def _set_parallel_devices_and_init_accelerator(self: Any) -> None:
        vendor = _vendor_for(tree, self._accelerator_flag)
        if vendor is not None:
            _require_usable(tree, vendor)
            # Here the accelerator is known, also when "auto" chose it (a GPU script run on Gaudi hardware).
            _use_vendor_equivalent(tree, self)
        original(self)

    cls._set_parallel_devices_and_init_accelerator = _mark(  # type: ignore[attr-defined]
        _set_parallel_devices_and_init_accelerator, original
    )


def _wrap_choose_strategy(tree: Tree, cls: type) -> None:
    original = _original(cls, "_choose_strategy")
    _, strategy_registry = registries(tree)

    def _choose_strategy(self: Any) -> Any:
        vendor = _vendor_for(tree, self._accelerator_flag)
        if vendor is None:
            return original(self)
        check_lightning_version(tree)
        if self._num_nodes_flag == 1 and len(self._parallel_devices) > 1 and is_interactive(tree):
            ddp = lightning_equivalents(tree).get((vendor.spec.name, "DDPStrategy"))
            if ddp is not None:
                return ddp[1](start_method="fork")
        if self._num_nodes_flag > 1 or len(self._parallel_devices) > 1:
            return vendor.spec.parallel_strategy
        name = vendor.spec.single_strategy
        init_params = strategy_registry[name]["init_params"] if name in strategy_registry else {}
        device = self._parallel_devices[0] if self._parallel_devices else None
        if device is None:
            return name
        return vendor.strategies[name](device=device, **init_params)

    cls._choose_strategy = _mark(_choose_strategy, original)  # type: ignore[attr-defined]


_CUDA_SCALER_DISABLED = "torch.cuda.amp.GradScaler is enabled, but CUDA is not available"


def _wrap_init_precision(tree: Tree, cls: type) -> None:
    original = _original(cls, "_check_and_init_precision")

    def _check_and_init_precision(self: Any) -> Any:
        vendor = _vendor_for(tree, self._accelerator_flag)
        if vendor is None:
            return original(self)
        flag = self._precision_flag if tree.kind == "pytorch" else self._precision_input
        reason = vendor.spec.refused_precisions.get(flag) if isinstance(flag, str) else None
        if reason is not None:
            entry = "Trainer" if tree.kind == "pytorch" else "Fabric"
            raise ConfigurationError(
                f"{entry}(accelerator={vendor.spec.name!r}, precision={flag!r}) is not supported. {reason}"
            )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape(_CUDA_SCALER_DISABLED))
            return original(self)

    cls._check_and_init_precision = _mark(_check_and_init_precision, original)  # type: ignore[attr-defined]


def _wrap_devices_if_auto(tree: Tree, cls: type) -> None:
    original = _original(cls, "_set_devices_flag_if_auto_passed")
    entry = "Trainer" if tree.kind == "pytorch" else "Fabric"

    def _set_devices_flag_if_auto_passed(self: Any) -> None:
        vendor = _vendor_for(tree, self._accelerator_flag)
        if vendor is not None and self._devices_flag == "auto" and is_interactive(tree):
            count = self.accelerator.auto_device_count()
            if count > 1:
                name = vendor.spec.name.upper()
                self._devices_flag = 1
                log_as_connector(
                    tree,
                    f"{entry} will use only 1 of {count} {name}s because it is running inside an interactive / "
                    f"notebook environment. You may set `{entry}(devices={count})` (started by fork), but several "
                    "devices inside an interactive / notebook environment are experimental, as with GPUs.",
                )
                return
        original(self)

    cls._set_devices_flag_if_auto_passed = _mark(_set_devices_flag_if_auto_passed, original)  # type: ignore[attr-defined]


def device_info_lines(tree: Tree, trainer: Any) -> tuple[list[str], list[str]]:
    """Lightning-style start-up lines for the vendor accelerators of ``tree``, and the warnings for unused ones.

    Each vendor's availability is checked once. The lines read ``"HPU available: True (emulated), using: 2 devices"``;
    an available vendor that the Trainer does not use gets the warning Lightning gives an unused GPU:
    ``"IPU available but not used. You can set it by doing `Trainer(accelerator='ipu')`."``
    """
    lines, warnings = [], []
    for vendor in vendor_accelerators(tree):
        availability = vendor.plugin.spec.check_availability()
        note = " (emulated)" if availability.state == "emulated" else ""
        used = vendor.owns(trainer.accelerator)
        using = trainer.num_devices if used else 0
        lines.append(
            f"{vendor.spec.name.upper()} available: {availability.usable}{note}, using: {using} "
            f"device{'' if using == 1 else 's'}"
        )
        if availability.usable and not used:
            name = vendor.spec.name
            warnings.append(
                f"{name.upper()} available but not used. You can set it by doing `Trainer(accelerator='{name}')`."
            )
    return lines, warnings


def _wrap_log_device_info(tree: Tree) -> None:
    module = device_info_module(tree)
    if module is None:
        return
    original = _original_function(module, "_log_device_info")

    def _log_device_info(trainer: Any) -> None:
        original(trainer)
        # Lightning's own rank-zero logger, so the lines appear next to "GPU available: ..." and obey its level.
        lines, warnings = device_info_lines(tree, trainer)
        for line in lines:
            module.rank_zero_info(line)
        for warning in warnings:
            module.rank_zero_warn(warning)

    setattr(module, "_log_device_info", _mark(_log_device_info, original))  # noqa: B010 (a module attribute)


def _original_function(module: ModuleType, name: str) -> Callable[..., Any]:
    current: Callable[..., Any] = getattr(module, name)
    original: Callable[..., Any] = getattr(current, _MARK, current)
    return original


def install_selection(tree: Tree) -> None:
    """Wrap the connector of ``tree`` (idempotent: re-installing wraps the original again, not the wrap)."""
    _wrap_log_device_info(tree)
    cls = connector_class(tree)
    _wrap_check_flags(tree, cls)
    _wrap_check_devices(tree, cls)
    _wrap_choose_auto_accelerator(tree, cls)
    _wrap_init_accelerator(tree, cls)
    _wrap_devices_if_auto(tree, cls)
    _wrap_init_precision(tree, cls)
    _wrap_choose_strategy(tree, cls)
