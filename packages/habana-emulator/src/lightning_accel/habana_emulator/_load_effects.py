"""What loading the SDK does to the process, done by the emulator at the same moment.

The list, with its sources, is in docs/emulator.md ("What loading the SDK does").

Each function below is one effect of gaudi-pytorch-bridge 1.19.0's Python (paths under
``python_packages/habana_frameworks/torch/``), called from the emulated module whose import does it on the SDK:

* :func:`set_inductor_threads` -- ``__init__.py:23``;
* :func:`default_habana_profile` -- ``core/__init__.py:121-125,147``;
* :func:`overwrite_torch_functions` -- ``core/__init__.py:49`` running ``core/torch_overwrites.py:117-497``;
* the ``hpu_backend`` registration -- ``core/__init__.py:55`` imports ``dynamo/compile_backend/backends.py``, whose
  ``@register_backend`` runs (``backends.py:47``), in eager and lazy mode;
* the distributed set-up -- ``__init__.py:55`` imports ``distributed/hccl/__init__.py``, which runs
  ``initialize_distributed_hpu()`` (``:113``), registers ``"hccl"`` (``:120``) and keeps collectives out of dynamo
  graphs (:func:`disallow_collectives_in_graph`, ``:123-165``).

In eager mode the SDK loads at the end of ``import torch`` (torch's device-backend autoload), in lazy mode at the first
``import habana_frameworks.torch``; so do these effects. Each runs once per process.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
from typing import Any

import torch

from . import _module_names

__all__ = [
    "APPLIED",
    "default_habana_profile",
    "disallow_collectives_in_graph",
    "overwrite_torch_functions",
    "set_inductor_threads",
]

#: The effects applied in this process, by name (what the load-effects test reads).
APPLIED: set[str] = set()

_COLLECTIVE_BASE_NAMES = (
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "gather",
    "irecv",
    "isend",
    "recv",
    "reduce",
    "scatter",
    "send",
)


def _once(name: str) -> bool:
    if name in APPLIED:
        return False
    APPLIED.add(name)
    return True


def set_inductor_threads() -> None:
    """``TORCHINDUCTOR_COMPILE_THREADS=1``, set unconditionally (``__init__.py:22-23``: no inductor process pool)."""
    if _once("TORCHINDUCTOR_COMPILE_THREADS"):
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"


def default_habana_profile() -> None:
    """``HABANA_PROFILE=profile_api_light`` when it is unset (``core/__init__.py:121-125``, called at ``:147``)."""
    if _once("HABANA_PROFILE"):
        os.environ.setdefault("HABANA_PROFILE", "profile_api_light")


def overwrite_torch_functions(lazy: bool) -> None:
    """The SDK's wrappers of torch functions (``core/torch_overwrites.py:117-497``).

    Both modes: ``distributed_c10d._get_pg_default_device`` answers ``hpu`` for an ``"hccl"`` group (``:119-129``);
    ``torch.manual_seed`` seeds the HPU generator too and ``torch.seed`` reseeds it (``:133-147``, ``:489-497``);
    ``torch.distributed.init_process_group`` and ``new_group`` become wrappers with the parameters of torch 2.5 minus
    any newer ones, so ``device_id=`` is refused with a ``TypeError`` (``:187-257``); ``torch.random.fork_rng`` forks
    the HPU generator by default (``:364-382``).

    Lazy mode only: ``torch.save`` copies tensors to the host first (``:389-432``) and ``torch.load`` loads to the
    host and then moves to ``map_location`` (``:501-560``); every module assigned as a child afterwards gets the
    SDK's module-name hooks (``:162-183``, ``:259-282``; :mod:`._module_names`).
    """
    if not _once("overwrite_torch_functions"):
        return
    import torch.distributed as dist

    from .hpu import random as hpu_random

    original_default_device = dist.distributed_c10d._get_pg_default_device

    @functools.wraps(original_default_device)
    def _get_pg_default_device(group: Any = None) -> torch.device:
        # The SDK asks group._get_backend_name(), which its ProcessGroupHCCL answers "hccl"; the emulated group is a
        # custom backend, whose own name says "custom", so the name it was registered under is asked instead.
        if dist.get_backend(group) == "hccl":
            return torch.device("hpu")
        return original_default_device(group)

    # The SDK replaces this function at load too (bridge 1.19.0 core/torch_overwrites.py:119-129).
    dist.distributed_c10d._get_pg_default_device = _get_pg_default_device

    original_manual_seed = torch.manual_seed

    @functools.wraps(original_manual_seed)
    def manual_seed(seed: Any) -> torch.Generator:
        hpu_random.manual_seed(seed)
        return original_manual_seed(seed)

    torch.manual_seed = manual_seed

    original_seed = torch.seed

    @functools.wraps(original_seed)
    def seed() -> int:
        value = original_seed()
        hpu_random.manual_seed_all(value)
        return value

    torch.seed = seed

    _wrap_process_groups(dist)

    original_fork_rng = torch.random.fork_rng
    fork_parameters = inspect.signature(original_fork_rng).parameters

    @functools.wraps(original_fork_rng)
    def fork_rng(*args: Any, **kwargs: Any) -> Any:
        if "device_type" in fork_parameters and kwargs.get("device_type") is None:
            kwargs["device_type"] = "hpu"
        return original_fork_rng(*args, **kwargs)

    torch.random.fork_rng = fork_rng

    if lazy:
        _wrap_serialization()
        _module_names.install(lazy=True)
        APPLIED.add("lazy module-name hooks")


def _wrap_process_groups(dist: Any) -> None:
    from datetime import timedelta

    init_original = dist.init_process_group
    new_group_original = dist.new_group

    # The SDK's wrappers list these parameters and no others (torch_overwrites.py:192, :214-223).
    @functools.wraps(init_original)
    def init_process_group(
        backend: Any,
        init_method: Any = None,
        timeout: Any = timedelta(seconds=1800),
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        group_name: str = "",
        pg_options: Any = None,
    ) -> Any:
        return init_original(
            backend,
            init_method=init_method,
            timeout=timeout,
            world_size=world_size,
            rank=rank,
            store=store,
            group_name=group_name,
            pg_options=pg_options,
        )

    @functools.wraps(new_group_original)
    def new_group(ranks: Any = None, timeout: Any = None, backend: Any = None, pg_options: Any = None) -> Any:
        return new_group_original(ranks, timeout=timeout, backend=backend, pg_options=pg_options)

    # As on the SDK (functools.wraps there too), inspect.signature() shows torch's parameters, device_id included,
    # while a call with device_id= fails with a TypeError.
    dist.init_process_group = init_process_group
    dist.new_group = new_group


def _wrap_serialization() -> None:
    original_save = torch.save
    original_load = torch.load

    def to_host(obj: Any) -> Any:
        if isinstance(obj, torch.Size):
            return obj
        if isinstance(obj, dict):
            return {k: to_host(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [to_host(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(to_host(v) for v in obj)
        if isinstance(obj, torch.Tensor):
            return obj.data.detach().clone().cpu()
        return obj

    @functools.wraps(original_save)
    def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        original_save(to_host(obj), f, *args, **kwargs)

    def to_device(obj: Any, location: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return location(obj, obj.device) if callable(location) else obj.to(location)
        if isinstance(obj, dict):
            return {k: to_device(v, location) for k, v in obj.items()}
        if isinstance(obj, list):
            return [to_device(v, location) for v in obj]
        if isinstance(obj, tuple):
            return tuple(to_device(v, location) for v in obj)
        return obj

    @functools.wraps(original_load)
    def load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
        obj = original_load(f, map_location="cpu", **kwargs)
        device: Any = "cpu"
        if isinstance(map_location, (str, torch.device)) or callable(map_location):
            device = map_location
        elif isinstance(map_location, dict):
            device = map_location.get("cpu", "cpu")
        return obj if device == "cpu" else to_device(obj, device)

    torch.save = save
    torch.load = load  # type: ignore[assignment]  # the SDK replaces it with a wrapper of its own signature
    APPLIED.add("lazy torch.save/torch.load")


def disallow_collectives_in_graph() -> None:
    """Keep every ``torch.distributed`` collective out of dynamo graphs (``distributed/hccl/__init__.py:123-165``)."""
    if not _once("collectives disallowed in graph"):
        return
    import torch._dynamo
    import torch.distributed as dist

    # vars() and an exact type check: asking the deprecated alias reduce_op (isinstance, getattr) warns.
    for function in list(vars(dist).values()):
        if type(function) is not types.FunctionType:
            continue
        if any(name in function.__name__ for name in _COLLECTIVE_BASE_NAMES):
            try:
                torch._dynamo.decorators._disallow_in_graph_helper(False)(function)
            except Exception:  # the SDK's fallback for older torch; then it leaves the function alone
                try:
                    torch._dynamo.disallow_in_graph(function)
                except Exception:
                    continue
