"""``torch.compile(model)`` on an HPU run compiles with ``hpu_backend``, not with torch's default backend Inductor.

Inductor has no HPU code generation: a GPU script's ``torch.compile(model)`` run with ``accelerator="hpu"`` crashes in
its first training step inside Inductor (an empty ``AssertionError`` from its lowering, or ``KeyError: 'hpu'`` for a
module compiled inside the model). transformers' Trainer compiles with ``hpu_backend`` on HPUs by itself; the HPU
strategies do the same for Lightning, at the points where Lightning takes a compiled model apart and compiles it
again:

- the Trainer keeps the compile context of ``Trainer.fit(torch.compile(model))`` on the LightningModule; the HPU
  strategies' ``connect`` compiles the module again with ``hpu_backend`` (Lightning's public ``to_uncompiled`` and
  ``from_compiled``);
- Fabric compiles ``fabric.setup(torch.compile(model))`` again after the strategy's ``setup_module``, with the arguments
  the user gave; for a module an HPU strategy set up, ``backend`` becomes ``"hpu_backend"``;
- a module compiled inside the model (``self.net = torch.compile(net)``), found among the model's submodules at
  set-up, is compiled again in place.

Only Inductor (named or torch's default) is replaced. Any other backend (``"hpu_backend"``, ``"eager"``,
``"aot_eager"``, a callable) is left as given. ``fullgraph`` and ``dynamic`` are kept; ``mode`` and ``options`` are
Inductor's settings and are dropped. One rank-zero warning per process names ``hpu_backend`` and what was dropped.
A function compiled with ``@torch.compile`` (not a module) cannot be seen at set-up: pass ``backend="hpu_backend"``;
a Trainer run that fails inside Inductor gets that fix added to torch's error (``_inductor_hint``).

Example:
    >>> model = torch.compile(model)  # doctest: +SKIP
    >>> Trainer(accelerator="hpu").fit(model)  # doctest: +SKIP  # warns once, compiles with hpu_backend
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_warn

from lightning_accel.core.compat import lightning_module_compile_context, wrap_fabric_reapply_compile

__all__ = ["FabricCompilesWithHPUBackend", "TrainerCompilesWithHPUBackend", "hpu_compile_kwargs"]

HPU_BACKEND = "hpu_backend"
_INDUCTOR = "inductor"
_INDUCTOR_SETTINGS = ("mode", "options")

# Modules an HPU Fabric strategy returned from setup_module: Fabric compiles exactly these again (weak, so that a
# finished run's model is never kept alive).
_SET_UP_BY_HPU: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_warned = [False]


def _warn_once(where: str, dropped: list[str]) -> None:
    if _warned[0]:
        return
    _warned[0] = True
    extra = (
        f" Inductor's {' and '.join(repr(k) for k in dropped)} do not apply to hpu_backend and were dropped."
        if dropped
        else ""
    )
    rank_zero_warn(
        f"{where} was compiled with torch's default backend Inductor, which cannot compile for HPUs (it fails inside "
        f"Inductor at the first step): it is compiled with backend='hpu_backend' instead, as transformers' Trainer "
        f"does on Gaudi.{extra} Pass torch.compile(..., backend='hpu_backend') to choose it yourself and silence this "
        "warning.",
        category=UserWarning,
    )


def hpu_compile_kwargs(compile_kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """``torch.compile`` arguments for an HPU: ``compile_kwargs`` with ``hpu_backend`` for Inductor.

    Returns:
        ``None`` when the backend is not Inductor (the arguments stand as given); otherwise the new arguments and
        the names of Inductor's settings that were dropped.

    Example:
        >>> hpu_compile_kwargs({"mode": "max-autotune", "fullgraph": True})
        ({'fullgraph': True, 'backend': 'hpu_backend'}, ['mode'])
    """
    if compile_kwargs.get("backend", _INDUCTOR) != _INDUCTOR:
        return None
    dropped = [k for k in _INDUCTOR_SETTINGS if compile_kwargs.get(k) is not None]
    kept = {k: v for k, v in compile_kwargs.items() if k not in (*_INDUCTOR_SETTINGS, "backend")}
    return {**kept, "backend": HPU_BACKEND}, dropped


def _kwargs_of_context(context: Any) -> dict[str, Any] | None:
    """The ``torch.compile`` arguments behind a compiled module's Dynamo context, as far as they matter here.

    ``None`` when the backend cannot be told (a torch that keeps it elsewhere): the module is then left as it is.
    """
    backend: Any = getattr(context, "callback", None)
    # torch wraps the backend in layers, each keeping the one below as _torchdynamo_orig_backend; the innermost is
    # torch.compile's wrapper, named by compiler_name ("inductor" for torch's default).
    while hasattr(backend, "_torchdynamo_orig_backend"):
        backend = backend._torchdynamo_orig_backend
    name = getattr(backend, "compiler_name", None)
    if not isinstance(name, str):
        return None
    kwargs: dict[str, Any] = {"backend": name, "fullgraph": bool(getattr(context, "fullgraph", False))}
    if getattr(backend, "dynamic", None) is not None:
        kwargs["dynamic"] = backend.dynamic
    if name == _INDUCTOR and getattr(backend, "config", None):
        kwargs["options"] = dict(backend.config)  # mode= and options= both end up in Inductor's config
    return kwargs


def _recompiled(compiled: torch.nn.Module, where: str) -> torch.nn.Module | None:
    """``compiled`` (an ``OptimizedModule``) compiled again with ``hpu_backend``, or ``None`` to keep it."""
    given = _kwargs_of_context(getattr(compiled, "dynamo_ctx", None))
    swapped = None if given is None else hpu_compile_kwargs(given)
    if swapped is None:
        return None
    kwargs, dropped = swapped
    _warn_once(where, dropped)
    original: torch.nn.Module = compiled._orig_mod  # type: ignore[assignment]
    recompiled: torch.nn.Module = torch.compile(original, **kwargs)  # type: ignore[assignment]
    return recompiled


def _recompile_submodules(module: torch.nn.Module) -> None:
    """Compile every Inductor-compiled submodule of ``module`` again with ``hpu_backend``, in place."""
    from torch._dynamo import OptimizedModule

    found = [(name, sub) for name, sub in module.named_modules() if name and isinstance(sub, OptimizedModule)]
    for name, sub in found:
        if any(name.startswith(outer + ".") for outer, _ in found if outer != name):
            continue  # inside another compiled module: that one is compiled again as a whole
        recompiled = _recompiled(sub, f"The submodule {name!r} of {type(module).__name__} (torch.compile inside it)")
        if recompiled is not None:
            parent_name, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent_name), child, recompiled)


def _recompile_lightning_module(model: Any) -> None:
    """The Trainer's compiled LightningModule, and its compiled submodules, with ``hpu_backend``."""
    from lightning.pytorch.utilities.compile import from_compiled, to_uncompiled

    context = lightning_module_compile_context(model)
    given = None if context is None else _kwargs_of_context(context)
    swapped = None if given is None else hpu_compile_kwargs(given)
    if swapped is not None:
        kwargs, dropped = swapped
        _warn_once(f"The model ({type(model).__name__}, torch.compile(model))", dropped)
        from_compiled(torch.compile(to_uncompiled(model), **kwargs))  # type: ignore[arg-type]
    _recompile_submodules(model)


def _fabric_kwargs(module: Any, compile_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments Fabric compiles ``module`` again with: ``hpu_backend`` for Inductor on an HPU strategy's module."""
    if module not in _SET_UP_BY_HPU:
        return compile_kwargs
    swapped = hpu_compile_kwargs(compile_kwargs)
    if swapped is None:
        return compile_kwargs
    kwargs, dropped = swapped
    _warn_once(f"The model ({type(getattr(module, 'module', module)).__name__}, torch.compile(model))", dropped)
    return kwargs


class TrainerCompilesWithHPUBackend:
    """Mixin for the Trainer's HPU strategies: a model compiled with Inductor is compiled with ``hpu_backend``."""

    def connect(self, model: Any) -> None:
        """Compile the model again with ``hpu_backend`` where it was compiled with Inductor, then connect it."""
        _recompile_lightning_module(model)
        super().connect(model)  # type: ignore[misc]


class FabricCompilesWithHPUBackend:
    """Mixin for Fabric's HPU strategies: a model compiled with Inductor is compiled with ``hpu_backend``."""

    def setup_module(self, module: torch.nn.Module) -> Any:
        """Set the module up as the Lightning strategy does; Fabric then compiles it with ``hpu_backend``."""
        from torch._dynamo import OptimizedModule

        wrap_fabric_reapply_compile(_fabric_kwargs)
        if isinstance(module, OptimizedModule):  # Fabric.setup(..., _reapply_compile=False)
            module = (
                _recompiled(module, f"The model ({type(module._orig_mod).__name__}, torch.compile(model))") or module
            )
        _recompile_submodules(module)
        set_up = super().setup_module(module)  # type: ignore[misc]
        _SET_UP_BY_HPU.add(set_up)
        return set_up
