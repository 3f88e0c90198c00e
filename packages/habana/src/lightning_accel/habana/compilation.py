"""Compiling a model for Gaudi with ``hpu_backend``: the whole model or its repeated blocks, from a chosen step.

Gaudi's default path is eager mode with ``torch.compile`` (lazy mode is being retired). What optimum-habana offers its
users for that path (``use_regional_compilation``, ``compile_dynamic``, ``compile_from_sec_iteration``), here for
Lightning: :func:`compile_regions` for any module (Fabric's ``setup`` too) and the :class:`HPUCompile` callback for the
Trainer (and so for LightningCLI's ``--trainer.callbacks``).

Regional compilation compiles each repeated block (a transformer layer) in place instead of the whole model. The
blocks of one class share their compiled code (dynamo reuses a frame's code for another instance of the same class,
since parameters are graph inputs), so a 12-layer model compiles one layer's graph, not twelve, and compiles in a
fraction of whole-model compile's time; the price is a graph boundary between blocks.

``options`` are the settings of the SDK's ``hpu_backend`` (its ``dynamo.compile_backend.config`` module); they are
checked against that module before anything compiles, so a misspelt key fails at once with the accepted ones, instead
of inside the first training step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "HPUCompile",
    "checked_options",
    "compile_regions",
    "compiled_frames",
    "repeated_blocks",
    "without_kv_cache",
]

_BACKEND = "hpu_backend"
_WITH_GRAPHS = (
    "HPUCompile and HPUGraphs are both callbacks of this Trainer, and cannot be combined (as on Gaudi): HPU graphs "
    "are captured in the SDK's lazy mode (PT_HPU_LAZY_MODE=1), torch.compile runs in its eager mode "
    "(PT_HPU_LAZY_MODE=0), and a graph captured around a compiled module replays nothing compiled. Keep one: "
    "HPUCompile(...) in eager mode, or HPUGraphs(...) in lazy mode."
)


def checked_options(options: Mapping[str, Any] | None, owner: str = "options") -> dict[str, Any]:
    """``options`` for ``hpu_backend``, checked against the SDK's compile-backend settings.

    Args:
        options: Setting name -> value, as ``torch.compile(..., options=...)`` takes them for ``hpu_backend``.
        owner: How the argument is named in the error (``"HPUCompile(options=...)"``).

    Returns:
        A copy of ``options`` (empty when ``None``).

    Raises:
        ConfigurationError: When ``options`` is not a mapping, a key is not a setting of the SDK's backend, or a value
            does not have the setting's type.

    Example:
        >>> checked_options({"force_static_compile": True})  # doctest: +SKIP
        {'force_static_compile': True}
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"{owner}={options!r} is not accepted: pass a dict of hpu_backend settings, e.g. "
            "{'force_static_compile': True}, or None."
        )
    settings: dict[str, Any] = sdk.compile_backend_config().get_config_copy()
    for key, value in options.items():
        if key not in settings:
            raise ConfigurationError(
                f"{owner} has {key!r}, which is not a setting of the SDK's hpu_backend. Accepted: "
                f"{', '.join(sorted(settings))} (habana_frameworks.torch.dynamo.compile_backend.config)."
            )
        expected = type(settings[key])
        if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
            raise ConfigurationError(
                f"{owner}[{key!r}]={value!r} is not accepted: the setting is a {expected.__name__} "
                f"(its default is {settings[key]!r})."
            )
    return dict(options)


def repeated_blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of ``module``: children of a ``ModuleList`` whose class occurs more than once in it.

    A transformer's layers (``model.layers``, ``transformer.h``) are such blocks. Blocks nested inside another
    repeated block are not listed again.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)]))
        >>> len(repeated_blocks(net))
        3
    """
    found: list[torch.nn.Module] = []
    taken: set[int] = set()
    for sub in module.modules():
        if id(sub) in taken or not isinstance(sub, torch.nn.ModuleList):
            continue
        children = list(sub)
        classes = [type(child) for child in children]
        for child in children:
            if classes.count(type(child)) > 1 and id(child) not in taken:
                found.append(child)
                taken.update(id(inner) for inner in child.modules())
    return found


def _blocks_of(module: torch.nn.Module, block_types: Sequence[type[torch.nn.Module]] | None) -> list[torch.nn.Module]:
    if block_types is None:
        return repeated_blocks(module)
    found: list[torch.nn.Module] = []
    taken: set[int] = set()
    for sub in module.modules():
        if isinstance(sub, tuple(block_types)) and id(sub) not in taken:
            found.append(sub)
            taken.update(id(inner) for inner in sub.modules())
    return found


def _is_builtin(block: torch.nn.Module) -> bool:
    # A forward defined inside torch (nn.Linear, nn.TransformerEncoderLayer, or a subclass that keeps their forward).
    return str(getattr(type(block).forward, "__module__", "")).startswith("torch.")


def _traceable(forward: Any) -> Any:
    # Dynamo never starts a frame in torch.nn's own files: Module.compile on a built-in block compiles its
    # `_call_impl` frame, skips it and then skips the built-in forward too, so nothing is compiled. A frame of this
    # file is traced, and inlines the built-in forward; its code object is shared by every block, so blocks of one
    # class still share one compiled graph.
    def call(*args: Any, **kwargs: Any) -> Any:
        return forward(*args, **kwargs)

    return call


_TRACEABLE_CODE = _traceable(None).__code__


def _compile_block(block: torch.nn.Module, **kwargs: Any) -> None:
    if _is_builtin(block):
        block.forward = torch.compile(_traceable(block.forward), **kwargs)
    else:
        block.compile(**kwargs)


def _records() -> list[Any]:
    return list(torch._dynamo.utils.get_compilation_metrics())


def compiled_frames(since: Any = None) -> int:
    """How many frames Dynamo compiled into a graph (a recompilation counts too), since the record ``since``.

    Reads torch's own compilation records (the latest 64); a frame that failed or fell back to eager (a graph break
    over the whole frame, the recompile limit) is not counted.

    Args:
        since: A record from ``torch._dynamo.utils.get_compilation_metrics()``, or ``None`` for all records kept.

    Example:
        >>> before = (torch._dynamo.utils.get_compilation_metrics() or [None])[-1]
        >>> compiled_frames(before)  # after a compiled step  # doctest: +SKIP
        1
    """
    records = _records()
    start = 0
    for index in range(len(records) - 1, -1, -1):
        if since is not None and records[index] is since:
            start = index + 1
            break
    return sum(1 for r in records[start:] if r.fail_type is None and (r.graph_op_count or 0) > 0)


def _has_cached_code(codes: Iterable[Any]) -> bool:
    # A second run of a model whose class was compiled before reuses Dynamo's cached code: no new record, but
    # engaged all the same.
    entries = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    if entries is None:
        return True  # cannot tell: never warn on a guess
    return any(entries(code) for code in codes)


def _kv_cache_models(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformers models inside ``module`` whose config keeps a KV cache (``use_cache=True``)."""
    found, configs = [], set()
    for sub in module.modules():  # outermost first: a model's inner modules share its config
        config = getattr(sub, "config", None)
        if type(sub).__module__.startswith("transformers.") and getattr(config, "use_cache", False) is True:
            if id(config) not in configs:
                configs.add(id(config))
                found.append(sub)
    return found


@contextlib.contextmanager
def without_kv_cache(module: torch.nn.Module) -> Iterator[list[torch.nn.Module]]:
    """Turn the KV cache of the transformers models inside ``module`` off (``config.use_cache=False``), then back on.

    Training needs no KV cache, and under regional compilation it costs one recompilation per layer: each layer's
    cache entry is a different object to Dynamo's guards (``layers[i].is_initialized``). :class:`HPUCompile` does
    this for the training of a ``fit`` (regional compilation); use it around a Fabric or hand-written loop.

    Yields:
        The models whose ``use_cache`` was turned off.

    Example:
        >>> with without_kv_cache(model):  # doctest: +SKIP
        ...     train(model)
    """
    changed = _kv_cache_models(module)
    configs: list[Any] = [model.config for model in changed]
    for config in configs:
        config.use_cache = False
    try:
        yield changed
    finally:
        for config in configs:
            config.use_cache = True


def _check_block_types(block_types: Any, owner: str) -> Sequence[type[torch.nn.Module]] | None:
    if block_types is None:
        return None
    types = list(block_types) if isinstance(block_types, Iterable) else [block_types]
    if not types or not all(isinstance(t, type) and issubclass(t, torch.nn.Module) for t in types):
        raise ConfigurationError(
            f"{owner}={block_types!r} is not accepted: pass the block classes to compile (subclasses of "
            "torch.nn.Module, e.g. [LlamaDecoderLayer]), or None to compile the repeated blocks of each ModuleList."
        )
    return types


def compile_regions(
    module: torch.nn.Module,
    *,
    block_types: Sequence[type[torch.nn.Module]] | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    options: Mapping[str, Any] | None = None,
) -> list[torch.nn.Module]:
    """Compile ``module``'s repeated blocks in place with ``hpu_backend``, and return them.

    Each block is compiled with ``nn.Module.compile``, so the module keeps its structure, parameter names and
    ``state_dict`` (checkpoints of the compiled and the eager module are the same); blocks of one class share their
    compiled code. A block whose ``forward`` is torch's own (``nn.Linear``, ``nn.TransformerEncoderLayer``) gets a
    compiled ``forward`` instead: Dynamo skips torch.nn's files, so ``nn.Module.compile`` would compile nothing
    there. Works on a LightningModule, a Fabric model before ``fabric.setup``, or any module. Warns when a
    transformers model inside trains with its KV cache on (see :func:`without_kv_cache`).

    Args:
        module: The model whose blocks are compiled.
        block_types: The block classes to compile (every instance, outermost only); by default the repeated children
            of each ``ModuleList`` (:func:`repeated_blocks`).
        dynamic: ``torch.compile``'s ``dynamic``: ``None`` (recompile once on a new shape, then dynamic), ``True`` or
            ``False``.
        fullgraph: ``torch.compile``'s ``fullgraph``: fail on a graph break inside a block.
        options: Settings of the SDK's ``hpu_backend`` (:func:`checked_options`).

    Returns:
        The blocks compiled.

    Raises:
        ConfigurationError: When there is no block to compile, or an argument is not accepted.

    Example:
        >>> from lightning_accel.habana.compilation import compile_regions
        >>> blocks = compile_regions(model, dynamic=False)  # doctest: +SKIP
    """
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError(f"compile_regions(module=...) needs a torch.nn.Module, got {type(module).__name__}.")
    types = _check_block_types(block_types, "compile_regions(block_types=...)")
    if dynamic not in (None, True, False):
        raise ConfigurationError(f"compile_regions(dynamic={dynamic!r}) is not accepted: True, False or None.")
    checked = checked_options(options, "compile_regions(options=...)")
    blocks = _blocks_of(module, types)
    if not blocks:
        wanted = "no repeated block in a ModuleList"
        if types:
            wanted = "no instance of " + ", ".join(t.__name__ for t in types)
        raise ConfigurationError(
            f"compile_regions found {wanted} in {type(module).__name__}, so there is nothing to compile regionally. "
            "Pass block_types=[YourBlock] to name the blocks, or compile the whole model."
        )
    cached = [m for m in _kv_cache_models(module) if m.training]
    if cached:
        rank_zero_warn(
            f"compile_regions: {type(cached[0]).__name__} keeps a KV cache (config.use_cache=True) while it trains, "
            "which makes Dynamo recompile each compiled layer once per layer (its guard on the cache's "
            "layers[i].is_initialized), up to the recompile limit, after which the layers run uncompiled. Train "
            "inside `with without_kv_cache(model):` (lightning_accel.habana.compilation), or set "
            "config.use_cache=False; HPUCompile(regions=True) does this for you.",
            category=UserWarning,
        )
    for block in blocks:
        _compile_block(block, backend=_BACKEND, dynamic=dynamic, fullgraph=fullgraph, options=checked or None)
    return blocks


class HPUCompile(Callback):
    """Compile the LightningModule with ``hpu_backend``: whole or by repeated blocks, from a chosen training step.

    Whole-model compilation compiles what ``self(...)`` runs (the module's ``forward``), as ``torch.compile`` of a
    LightningModule does in Lightning; regional compilation compiles the repeated blocks wherever the steps call them.
    Both compile in place (``nn.Module.compile``), so checkpoints keep their keys. ``from_step=1`` runs the first
    training step eagerly and compiles from the second, as optimum-habana's ``compile_from_sec_iteration``: the first
    step's one-off work (lazy initialisation, optimizer state) stays out of the graphs. Validation, testing and
    prediction outside ``fit`` compile when they start.

    ``compiled_autograd=True`` also compiles the backward passes, through the SDK's ``enable_compiled_autograd``
    (torch's compiled autograd, its graphs compiled with ``hpu_backend``): one graph for the whole backward instead
    of AOT autograd's per compiled region, with the optimizer's gradient hooks inside. As the SDK's function, it is
    process-wide and stays on after the run (the SDK has no call to turn it off).

    ``torch.compile`` needs the SDK's eager mode (``PT_HPU_LAZY_MODE=0``, the default since SDK 1.21); HPU graphs need
    lazy mode, so this callback and :class:`~lightning_accel.habana.HPUGraphs` in one Trainer are refused at set-up.

    After the first compiled step the callback checks that Dynamo compiled something (torch's compilation records, or
    code cached by an earlier run), and warns once with the cause and the fix when it did not: a ``training_step``
    that calls ``self.net(...)`` instead of ``self(...)`` under whole-model compilation, say. With ``regions``, the
    transformers models inside train with ``config.use_cache=False`` (restored when training ends): their KV cache
    would make each layer recompile (:func:`without_kv_cache`).

    Args:
        regions: ``False`` (the default) compiles the whole module; ``True`` its repeated blocks
            (:func:`repeated_blocks`); a list of classes, every instance of them.
        dynamic: ``torch.compile``'s ``dynamic`` (``None``, ``True`` or ``False``).
        fullgraph: ``torch.compile``'s ``fullgraph``.
        options: Settings of the SDK's ``hpu_backend``, checked when the Trainer sets up.
        from_step: The global training step from which the model runs compiled (0: from the start).
        compiled_autograd: Compile the backward passes too (process-wide, see above).

    Raises:
        ConfigurationError: On an argument that is not accepted, a Trainer whose accelerator is not an HPU, or one
            that also has the :class:`~lightning_accel.habana.HPUGraphs` callback.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUCompile
        >>> trainer = Trainer(accelerator="hpu", callbacks=[HPUCompile(regions=True, from_step=1)])  # doctest: +SKIP
    """

    def __init__(
        self,
        regions: bool | Sequence[type[torch.nn.Module]] = False,
        dynamic: bool | None = None,
        fullgraph: bool = False,
        options: Mapping[str, Any] | None = None,
        from_step: int = 0,
        compiled_autograd: bool = False,
    ) -> None:
        self.block_types = None if isinstance(regions, bool) else _check_block_types(regions, "HPUCompile(regions=...)")
        self.regions = regions is not False
        if dynamic not in (None, True, False):
            raise ConfigurationError(f"HPUCompile(dynamic={dynamic!r}) is not accepted: True, False or None.")
        if not isinstance(from_step, int) or isinstance(from_step, bool) or from_step < 0:
            raise ConfigurationError(
                f"HPUCompile(from_step={from_step!r}) is not accepted: the global step (an int >= 0) from which to run "
                "compiled, e.g. 1 to compile from the second step."
            )
        if not isinstance(compiled_autograd, bool):
            raise ConfigurationError(
                f"HPUCompile(compiled_autograd={compiled_autograd!r}) is not accepted: True or False."
            )
        self.compiled_autograd = compiled_autograd
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.options = options
        self.from_step = from_step
        self._checked: dict[str, Any] = {}
        self._compiled = False
        self._blocks: list[torch.nn.Module] = []
        self._since: Any = None
        self._calls = 0
        self._hooks: list[Any] = []
        self._verify_pending = False
        self._counted = False
        self._kv_cache = contextlib.ExitStack()

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        device = trainer.strategy.root_device
        if device.type != sdk.device_type():
            raise ConfigurationError(
                f"HPUCompile compiles for the HPU, but this Trainer runs on {device.type!r}. Use "
                "Trainer(accelerator='hpu'), or torch.compile with another backend for other devices."
            )
        from .graphs import HPUGraphs  # graphs imports nothing of this module; kept local to read as one check

        if any(isinstance(cb, HPUGraphs) for cb in trainer.callbacks):  # type: ignore[attr-defined]
            raise ConfigurationError(_WITH_GRAPHS)
        self._checked = checked_options(self.options, "HPUCompile(options=...)")
        if not self.regions and type(pl_module).forward is LightningModule.forward:
            raise ConfigurationError(
                f"HPUCompile() compiles the module's forward (what self(...) runs), and {type(pl_module).__name__} "
                "defines no forward, so nothing would be compiled. Define forward and call self(x) in the steps, or "
                "compile the blocks the steps call: HPUCompile(regions=True) or HPUCompile(regions=[YourBlock])."
            )

    def _compile(self, pl_module: LightningModule) -> None:
        if self._compiled:
            return
        self._compiled = True
        if self.compiled_autograd:
            sdk.compiled_autograd_module().enable_compiled_autograd()
        records = _records()
        self._since = records[-1] if records else None
        if self.regions:
            self._blocks = compile_regions(
                pl_module,
                block_types=self.block_types,
                dynamic=self.dynamic,
                fullgraph=self.fullgraph,
                options=self._checked,
            )
        else:
            pl_module.compile(
                backend=_BACKEND, dynamic=self.dynamic, fullgraph=self.fullgraph, options=self._checked or None
            )
        # Whether the first compiled step ran what was compiled: counted by hooks that stay out of the graphs. Not
        # on torch's own blocks: a hook there makes Dynamo trace their forward, hiding whether it would without.
        self._calls = 0

        @torch.compiler.disable
        def count(*_: Any) -> None:
            self._calls += 1

        counted = [m for m in (self._blocks or [pl_module]) if not _is_builtin(m)]
        self._hooks = [m.register_forward_pre_hook(count) for m in counted]
        self._counted = bool(counted)
        self._verify_pending = True

    def _verify(self, pl_module: LightningModule, where: str) -> None:
        """After the first compiled step: warn once when no frame was compiled, naming the cause and the fix."""
        if not self._verify_pending:
            return
        self._verify_pending = False
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if compiled_frames(self._since) > 0:
            return
        builtin = [b for b in self._blocks if _is_builtin(b)]
        codes = [type(m).forward.__code__ for m in (self._blocks or [pl_module]) if not _is_builtin(m)]
        if _has_cached_code(codes + ([_TRACEABLE_CODE] if builtin else [])):
            return
        name = type(pl_module).__name__
        if self.regions:
            classes = ", ".join(sorted({type(b).__name__ for b in self._blocks}))
            what = f"HPUCompile(regions=...) compiled {len(self._blocks)} blocks ({classes}) of {name}"
        else:
            what = f"HPUCompile() compiled {name}.forward (what self(...) runs)"
        if not self._counted:
            cause = f"{where} did not call them, or Dynamo skipped them"
            fix = "Check that the steps call these blocks; TORCH_LOGS=graph_breaks,recompiles shows what Dynamo skips."
        elif self._calls == 0:
            cause = (
                f"{where} never called them, so it ran uncompiled"
                if self.regions
                else f"{where} never called it: a step that calls a submodule directly (self.net(...), "
                "self.model(...)) runs it uncompiled"
            )
            fix = (
                "Call self(...) in the steps, with forward calling the submodule, or compile the blocks the steps "
                "call: HPUCompile(regions=True) or HPUCompile(regions=[YourBlock])."
                if not self.regions
                else "Name the blocks the steps call with HPUCompile(regions=[YourBlock])."
            )
        else:
            called = "them" if self.regions else "it"
            cause = f"{where} called {called}, but Dynamo compiled no frame (it skipped them or fell back to eager)"
            fix = "Run with TORCH_LOGS=graph_breaks,recompiles to see why Dynamo skipped them."
        rank_zero_warn(f"{what}, but {cause}: nothing was compiled. {fix}", category=UserWarning)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.regions:
            self._kv_cache.enter_context(without_kv_cache(pl_module))

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._kv_cache.close()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._kv_cache.close()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._verify(pl_module, f"the first compiled training step (batch {batch_idx})")

    @override
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._verify(pl_module, "the first validation step")

    @override
    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._verify(pl_module, "the first test step")

    @override
    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._verify(pl_module, "the first prediction step")

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_step >= self.from_step:
            self._compile(pl_module)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == "validate":  # in fit, the training steps decide (from_step)
            self._compile(pl_module)

    @override
    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._compile(pl_module)

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._compile(pl_module)
