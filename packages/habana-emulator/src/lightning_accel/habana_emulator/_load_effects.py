"""What loading the SDK does to the process, done by the emulator at the same moment.

The list, with its sources, is in docs/emulator.md ("What loading the SDK does").

Each function below is one effect of the SDK's Python at gaudi-pytorch-bridge bcc5172 (the 1.24 period; paths under
``python_packages/habana_frameworks/torch/``), called from the emulated module whose import does it on the SDK:

* :func:`set_inductor_threads` -- ``__init__.py:20-21``;
* :func:`default_habana_profile` -- ``core/__init__.py:117-121``, called at ``:143``;
* :func:`overwrite_torch_functions` -- ``core/__init__.py:48`` running ``core/torch_overwrites.py:117-586``;
* the ``hpu_backend`` registration -- ``core/__init__.py:53-56`` imports ``dynamo/compile_backend/backends.py``, whose
  ``@register_backend`` runs, in eager and lazy mode;
* the distributed set-up -- ``__init__.py:75`` imports ``distributed/hccl/__init__.py``, which runs
  ``initialize_distributed_hpu()`` (``:127``), registers ``"hccl"`` (``:139``) and keeps collectives out of dynamo
  graphs (:func:`disallow_collectives_in_graph`, ``:142-188``).

The checks of the torch build that come before all of these (``__init__.py:39-54``) are :mod:`._torch_build`'s.
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
    "COMM_GROUP_CACHE_VAR",
    "comm_group_cache_enabled",
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
    """``TORCHINDUCTOR_COMPILE_THREADS=1``, set unconditionally (``__init__.py:20-21``: no inductor process pool)."""
    if _once("TORCHINDUCTOR_COMPILE_THREADS"):
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"


def default_habana_profile() -> None:
    """``HABANA_PROFILE=profile_api_light`` when it is unset (``core/__init__.py:117-121``, called at ``:143``)."""
    if _once("HABANA_PROFILE"):
        os.environ.setdefault("HABANA_PROFILE", "profile_api_light")


def overwrite_torch_functions(lazy: bool) -> None:
    """The SDK's wrappers of torch functions (bcc5172 ``core/torch_overwrites.py:117-586``).

    Both modes: ``distributed_c10d._get_pg_default_device`` answers ``hpu`` for an ``"hccl"`` group (``:117-129``);
    ``torch.manual_seed`` seeds the HPU generator too and ``torch.seed`` reseeds it (``:149``, ``:524``);
    ``torch.distributed.init_process_group`` and ``new_group`` become the SDK's wrappers (``:187-277``, see
    :func:`_wrap_process_groups`): ``device_id`` is taken, passed on (an index-less HPU as ``hpu:0``) for an
    ``"hccl"`` group while ``PT_ENABLE_COMM_GROUP_CACHE`` is on, dropped otherwise; ``torch.random.fork_rng`` forks
    the HPU generator by default (``:384-402``).

    Lazy mode only: ``torch.save`` copies tensors to the host first (``:451``) and ``torch.load`` loads to the
    host and then moves to ``map_location`` (``:586``); every module assigned as a child afterwards gets the
    SDK's module-name hooks (``:185``, ``:302``; :mod:`._module_names`).
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

    # The SDK replaces this function at load too (bcc5172 core/torch_overwrites.py:117-129).
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


#: The SDK's switch of its communicator-group cache (a bridge-config flag, ``scripts/env_flags.yaml``; on by default).
COMM_GROUP_CACHE_VAR = "PT_ENABLE_COMM_GROUP_CACHE"

_comm_group_cache: bool | None = None


def comm_group_cache_enabled() -> bool:
    """``PT_ENABLE_COMM_GROUP_CACHE``, read at the first call that asks and kept, as the bridge's config caches it.

    Raises:
        ValueError: For a value that is not a boolean (the bridge stops the process there).
    """
    global _comm_group_cache
    if _comm_group_cache is None:
        raw = os.environ.get(COMM_GROUP_CACHE_VAR, "")
        # The bridge's parse (env_flags.cpp): empty is the default, 1/true and 0/false in any case, nothing else.
        if raw == "":
            _comm_group_cache = True
        elif raw.lower() in ("1", "true"):
            _comm_group_cache = True
        elif raw.lower() in ("0", "false"):
            _comm_group_cache = False
        else:
            raise ValueError(
                f"{COMM_GROUP_CACHE_VAR}={raw!r} is not a boolean. Accepted (any case): 1/true (the SDK's default: "
                "init_process_group and new_group of an 'hccl' group take the cached path, which passes device_id "
                "on) or 0/false (init_process_group drops device_id); unset it for the default."
            )
    return _comm_group_cache


def _hccl_or_default(backend: Any) -> bool:
    # The SDK's test (torch_overwrites.py:204-205, :238-240): no backend named, or a name containing "hccl"
    # ("cpu:gloo,hpu:hccl" too); a backend that is not a string fails there, as it does on the SDK.
    return backend is None or "hccl" in backend


def _wrap_process_groups(dist: Any) -> None:
    from datetime import timedelta

    from torch.distributed.constants import default_pg_timeout

    init_original = dist.init_process_group
    new_group_original = dist.new_group

    # bcc5172 core/torch_overwrites.py:193-274. The wrappers have these parameters and no others: torch's newer ones
    # (new_group's sort_ranks, init_process_group's _ranks) are a TypeError, and so is init_process_group without a
    # backend. The SDK keeps a rank-tuple cache of the groups on the cached path, but empties it on every call
    # (:209, :241), so no call is ever answered from it; what the path changes is what reaches torch.
    @functools.wraps(new_group_original)
    def new_group(
        ranks: Any = None,
        timeout: Any = default_pg_timeout,
        backend: Any = None,
        pg_options: Any = None,
        use_local_synchronization: bool = False,
        group_desc: Any = None,
        device_id: torch.device | None = None,
    ) -> Any:
        # Both paths, cached or not, hand torch all seven values, by position (:218-220, :223).
        return new_group_original(ranks, timeout, backend, pg_options, use_local_synchronization, group_desc, device_id)

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
        device_id: Any = None,
    ) -> Any:
        if comm_group_cache_enabled() and _hccl_or_default(backend):
            # :246-247: torch wants an index ("Please use a device_id with index."), so an index-less HPU becomes the
            # first one; any other device_id goes on as given (an int fails here, as on the SDK).
            if device_id is not None and device_id.type == "hpu" and device_id.index is None:
                device_id = torch.device("hpu", 0)
            init_original(backend, init_method, timeout, world_size, rank, store, group_name, pg_options, device_id)
            return None
        # :264-274: the eight values before device_id, which is dropped (a "gloo" group never gets one).
        return init_original(backend, init_method, timeout, world_size, rank, store, group_name, pg_options)

    # As on the SDK (functools.wraps there too), inspect.signature() shows torch's parameters, while the call takes
    # the wrapper's.
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
    """Keep every ``torch.distributed`` collective out of dynamo graphs (``distributed/hccl/__init__.py:142-188``)."""
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
