"""TorchInductor for the ``"hpu"`` device: the CPU's C++ code generator over HPU tensors, whose memory is host memory.

The emulated HPU's memory is host memory (the C++ device's allocator), so the kernels Inductor's C++ backend writes
for the CPU run on it unchanged. What Inductor needs to compile for a device type other than ``"cpu"``:

- a scheduling and wrapper code generator (``register_backend_for_device``): the CPU's ``CppScheduling``, and a
  Python wrapper that calls C++ kernels as it does for ``"cpu"`` (torch 2.13's ``PythonWrapperCodegen`` writes
  non-Triton kernel calls only for ``"cpu"`` and ``"mps"``, hence :class:`_HPUWrapper`);
- device op overrides (``register_device_op_overrides``): the CPU's;
- a dynamo device interface (``register_interface_for_device``): the CPU's, under the name ``"hpu"``.

They are registered once, the first time ``hpu_backend`` compiles (not when the SDK loads: these are Inductor's
registries, and a process that never compiles for the HPU keeps them untouched). The per-compilation settings
(:data:`CONFIG_PATCHES`) go to each ``hpu_backend`` compilation only, through ``compile_fx``'s ``config_patches``: the
C++ code generator as the backend Inductor reports for the device (it reports ``cuda_backend`` for every device but
the CPU), and no loop reordering or reindexing after fusion, which Inductor does only for GPU kernels. The CPU's own
Inductor keeps its settings.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["CONFIG_PATCHES", "register"]

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

_lock = threading.Lock()
_registered = False


def register() -> None:
    """Register the ``"hpu"`` device with Inductor and dynamo, once per process."""
    global _registered
    with _lock:
        if _registered:
            return
        from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
        from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides
        from torch._inductor.codegen.cpp import CppScheduling
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
        from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

        class _HPUWrapper(PythonWrapperCodegen):
            """The Python wrapper of an ``"hpu"`` graph: C++ kernels are called as for ``"cpu"``."""

            @staticmethod
            def create(
                is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None
            ) -> Any:
                if is_subgraph:
                    return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
                return _HPUWrapper()

            def _generate_kernel_call_helper(
                self, kernel_name: str, call_args: Any, *, device: Any = None, triton: bool = True, **kwargs: Any
            ) -> Any:
                if not triton:  # a C++ kernel over host memory
                    self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                    return None
                return super()._generate_kernel_call_helper(
                    kernel_name, call_args, device=device, triton=triton, **kwargs
                )

        register_backend_for_device("hpu", CppScheduling, _HPUWrapper, CppWrapperCpu)
        register_device_op_overrides("hpu", CpuDeviceOpOverrides())
        register_interface_for_device("hpu", type("HPUInterface", (CpuInterface,), {}))
        _registered = True
