"""The emulated HPU as a C++ device on c10's built-in ``DeviceType::HPU`` and ``DispatchKey::HPU``.

The real bridge is a C++ backend on that device type, so on Gaudi an HPU tensor is a plain ``torch.Tensor`` whose
dispatch keys are HPU, AutogradHPU and AutocastHPU. This device sits at the same layer, laid out as pytorch's
reference out-of-tree device (``torch_openreg``):

- ``csrc/runtime``: the allocator (host memory, counted exactly), the device guard (one device, ``hpu:0``; any other
  index fails as the SDK's guard does), torch's HPU hooks, the HPU's own random generator, pinned host memory;
- ``csrc/aten``: native factories, views, resizes and copies, and a boxed fallback that runs every other ATen
  operator with the CPU's own kernel on zero-copy aliases of the same memory; the identity of lazy mode's graphs;
- ``csrc/amp``: the SDK's autocast kernels on ``AutocastHPU`` (one boxed kernel per cast policy), registered by the
  emulated SDK at its load for the operators of its lists;
- ``csrc/module.cpp``: what the emulated SDK's Python modules read (memory statistics, the default generator) and the
  listeners they set (the operators Gaudi runs on its CPU fallback, lazy mode's graphs).

It is compiled on first use and cached (:func:`load`, :func:`cache_dir`), one process at a time under a lock the
system releases if the builder dies, in a fresh folder renamed into place when whole, with one progress line per unit;
every failure is a :class:`DeviceBuildError`. It depends on nothing above it: the emulated SDK modules use it, never
the other way round.

Example:
    >>> from lightning_accel import emulated_hpu
    >>> emulated_hpu.load()  # doctest: +SKIP
    >>> import torch
    >>> type(torch.ones(2, device="hpu"))  # doctest: +SKIP
    <class 'torch.Tensor'>
"""

from ._build import SUPPORTED_TORCH, DeviceBuildError, cache_dir, check_torch, load

__all__ = ["SUPPORTED_TORCH", "DeviceBuildError", "cache_dir", "check_torch", "load"]
