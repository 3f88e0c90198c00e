"""TorchInductor for the ``"hpu"`` device: the CPU's C++ code generator over HPU tensors, whose memory is host memory.

The emulated HPU's memory is host memory (the C++ device's allocator), so the kernels Inductor's C++ backend writes
for the CPU run on it unchanged. What Inductor needs to compile for a device type other than ``"cpu"``:

- a scheduling and wrapper code generator (``register_backend_for_device``): the CPU's ``CppScheduling``, and a
  Python wrapper that calls C++ kernels as it does for ``"cpu"`` (torch 2.13's ``PythonWrapperCodegen`` writes
  non-Triton kernel calls only for ``"cpu"`` and ``"mps"``, hence :class:`_HPUWrapper`);
- device op overrides (``register_device_op_overrides``): the CPU's;
- a dynamo device interface (``register_interface_for_device``): the CPU's, under the name ``"hpu"``.

They serve ``hpu_backend`` only. On Gaudi, Inductor has no ``"hpu"`` device, so torch's default backend fails on HPU
tensors (``KeyError: 'hpu'`` in Inductor on torch 2.13); the emulator keeps that. ``hpu_backend`` hands
``compile_fx`` :func:`inner_compile`, which puts the ``"hpu"`` entries into Inductor's and dynamo's registries for
the one graph it compiles (the forward, the backward that AOTAutograd compiles at the first backward call, every
recompilation) and takes them out again, leaving the registries as they were. Torch compiles each graph under
dynamo's ``compile_lock`` (the forward inside dynamo's compilation, the backward in ``compile_fx_backward``), so no
other compilation, in this thread or another, runs while the entries are there. The compiled code does not read the
registries: it keeps running after they are gone, and a graph that Inductor's caches load rather than compile (no
:func:`inner_compile` call) needs none of them.

The per-compilation settings (:data:`CONFIG_PATCHES`) go to each ``hpu_backend`` compilation only, through
``compile_fx``'s ``config_patches``: the C++ code generator as the backend Inductor reports for the device (it reports
``cuda_backend`` for every device but the CPU), and no loop reordering or reindexing after fusion, which Inductor does
only for GPU kernels. The CPU's own Inductor keeps its settings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

__all__ = ["CONFIG_PATCHES", "inner_compile"]

#: What every ``hpu_backend`` compilation sets for itself (see the module docstring).
CONFIG_PATCHES: dict[str, Any] = {
    # The scheduler's loop reordering and reindexing after fusion are for GPU kernels: Inductor skips them for nodes
    # of device "cpu" (Scheduler.shared_data_after_reordering_loop, _try_reindex_pointwise_for_reduction), but not
    # for "hpu" nodes, whose C++ kernels then fail in the reindexing.
    "loop_ordering_after_fusion": False,
    "loop_reindexing_after_fusion": False,
    # Inductor asks which code generator serves the current device (utils.get_current_backend): "cpu" answers with
    # cpu_backend and any other device with cuda_backend ("triton"), which sends the C++ kernels' masked loads down
    # Triton's path. The "hpu" kernels are the CPU's C++ ones.
    "cuda_backend": "cpp",
}

_DEVICE = "hpu"
_ABSENT = object()
# Re-entrant: a compilation inside a compilation (torch's own compile lock allows it) keeps the entries until the
# outer one ends.
_lock = threading.RLock()
_pieces: tuple[Any, Any, Any] | None = None


def _build_pieces() -> tuple[Any, Any, Any]:
    """The ``"hpu"`` wrapper code generator, device op overrides and device interface, built once."""
    from torch._dynamo.device_interface import CpuInterface
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    class _HPUWrapper(PythonWrapperCodegen):
        """The Python wrapper of an ``"hpu"`` graph: C++ kernels are called as for ``"cpu"``."""

        @staticmethod
        def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> Any:
            if is_subgraph:
                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return _HPUWrapper()

        def _generate_kernel_call_helper(
            self, kernel_name: str, call_args: Any, *, device: Any = None, triton: bool = True, **kwargs: Any
        ) -> Any:
            if not triton:  # a C++ kernel over host memory
                self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                return None
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    return _HPUWrapper, CpuDeviceOpOverrides(), type("HPUInterface", (CpuInterface,), {})


@contextmanager
def _registered() -> Iterator[None]:
    """Inductor and dynamo know device ``"hpu"`` inside the block; afterwards their registries are as they were."""
    global _pieces
    from torch._dynamo import device_interface
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    # Every registry the three register_* calls below write to.
    registries: list[MutableMapping[str, Any]] = [
        common.device_codegens,
        common.custom_backend_passes,
        common.custom_backend_codegen_configs,
        common.device_op_overrides_dict,
        device_interface.device_interfaces,
    ]
    with _lock:
        if _pieces is None:
            _pieces = _build_pieces()
        wrapper, op_overrides, interface = _pieces
        before = [registry.get(_DEVICE, _ABSENT) for registry in registries]
        try:
            common.register_backend_for_device(_DEVICE, CppScheduling, wrapper, CppWrapperCpu)
            common.register_device_op_overrides(_DEVICE, op_overrides)
            device_interface.register_interface_for_device(_DEVICE, interface)
            yield
        finally:
            for registry, previous in zip(registries, before, strict=True):
                if previous is _ABSENT:
                    registry.pop(_DEVICE, None)
                else:
                    registry[_DEVICE] = previous


def inner_compile(graph_module: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """Inductor's ``compile_fx_inner`` for one graph of ``hpu_backend``, with device ``"hpu"`` registered meanwhile.

    Example:
        >>> compile_fx(graph_module, example_inputs, inner_compile=inner_compile, config_patches=CONFIG_PATCHES)
    """
    from torch._inductor.compile_fx import compile_fx_inner

    with _registered():
        return compile_fx_inner(graph_module, example_inputs, **kwargs)
