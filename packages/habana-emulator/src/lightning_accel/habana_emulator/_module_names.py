"""The SDK's lazy-mode module names: forward hooks on every module assigned as a child after the SDK loads.

In lazy mode the SDK's load wraps ``nn.Module.add_module`` and ``nn.Module.__setattr__`` (gaudi-pytorch-bridge 1.19.0,
``core/torch_overwrites.py:162-183`` and ``:259-282``): a module assigned as another module's child, or added with
``add_module`` (``nn.Sequential``, ``nn.ModuleList`` ...), gets ``custom_name`` (its attribute name), ``names_hook``,
a forward pre-hook and an always-called forward hook (``:45-98``). The hooks keep a stack of nested names
(``outer/inner``) that the bridge labels its graphs with (``utils.debug._set_module_name``), and the forward hook
registers a gradient hook on each output that requires grad, naming the backward ``gradient/<name>``.

What users meet: those modules have hooks, so ``make_graphed_callables(model.child, ...)`` fails its "Modules must not
have hooks registered" assertion in lazy mode, and every child's forward pays for two hooks. The emulator installs the
same wrappers at the same moment and keeps the same names; nothing else reads them here (the emulator dumps no
graphs), so :func:`current_name` shows them. ``PT_HPU_INFERENCE_MODE``'s renumbering of ``relu`` modules is not
reproduced.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from typing import Any

import torch

__all__ = ["current_name", "install"]

_original_add_module = torch.nn.Module.add_module
_original_setattr = torch.nn.Module.__setattr__

_lock = threading.Lock()
_stack: deque[str] = deque()
_current = ""


def current_name() -> str:
    """Emulator only: the module name the bridge would label work with now (``""`` outside any hooked module)."""
    return _current


def _set_name(name: str) -> None:
    global _current
    _current = name


def _hooked(obj: Any) -> bool:
    return getattr(obj, "names_hook", False) is True


def _pre_forward(module: torch.nn.Module, inputs: Any) -> None:
    with _lock:
        try:
            name = f"{_stack[-1]}/{module.custom_name}" if _stack else str(module.custom_name)
            _stack.append(name)
            _set_name(name)
        except Exception:  # the SDK's bare except: a module without custom_name is left unnamed
            pass


def _gradient_hook(name: str) -> Any:
    def hook(grad: torch.Tensor) -> torch.Tensor:
        _set_name(name)
        return grad

    return hook


def _post_forward(module: torch.nn.Module, inputs: Any, output: Any) -> None:
    with _lock:
        name = _stack.pop()
        _set_name(_stack[-1] if _stack else "")
        try:
            for tensor in [output] if isinstance(output, torch.Tensor) else output:
                if isinstance(tensor, torch.Tensor) and tensor.requires_grad and not _hooked(tensor):
                    tensor.register_hook(_gradient_hook("gradient/" + name))
                    tensor.names_hook = True  # type: ignore[attr-defined]
        except Exception:  # the SDK's bare except: an output that cannot be iterated gets no gradient hook
            pass


def _name(module: torch.nn.Module, name: str) -> None:
    if _hooked(module):
        return
    try:
        module.custom_name = name  # type: ignore[assignment]
        module.register_forward_pre_hook(_pre_forward)
        module.register_forward_hook(_post_forward, always_call=True)
        module.names_hook = True  # type: ignore[assignment]
    except RuntimeError:  # as the SDK: a module that refuses hooks (a ScriptModule) stays unnamed
        pass


def _add_module(self: torch.nn.Module, name: str, module: torch.nn.Module | None) -> None:
    if isinstance(module, torch.nn.Module):
        _name(module, name)
    _original_add_module(self, name, module)


def _setattr(self: torch.nn.Module, name: str, value: Any) -> None:
    if isinstance(value, torch.nn.Module):
        _name(value, name)
    _original_setattr(self, name, value)


# As the SDK's wrappers (functools.wraps there): they carry torch's names and docstrings.
functools.update_wrapper(_add_module, _original_add_module)
functools.update_wrapper(_setattr, _original_setattr)


def install(lazy: bool) -> None:
    """Wrap ``add_module`` and ``__setattr__`` as the SDK's lazy-mode load does; in eager mode leave torch's own.

    The emulator's tests switch modes inside one process, so eager mode puts torch's functions back.
    """
    torch.nn.Module.add_module = _add_module if lazy else _original_add_module  # type: ignore[method-assign]
    torch.nn.Module.__setattr__ = _setattr if lazy else _original_setattr  # type: ignore[method-assign]
