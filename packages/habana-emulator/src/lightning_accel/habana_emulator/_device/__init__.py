"""The emulated HPU as a torch device named ``"hpu"``.

Nothing here runs at import: :func:`install` does it, once per process. Afterwards ``torch.randn(4, device="hpu")``,
``tensor.to("hpu")``, ``module.to("hpu")``, autograd, optimizers, ``torch.save``/``torch.load`` and
``torch.distributed`` (gloo, through :func:`unwrap`) work on ``"hpu"`` tensors, and every operation runs on the
backing device (the CPU; a CUDA GPU with ``LIGHTNING_ACCEL_EMULATE_BACKEND=cuda``).

How it is built (one job per module):

- ``_install``: torch's hook for out-of-tree Python backends renames PrivateUse1 to ``"hpu"`` and registers
  ``_backend``'s device module (``torch.hpu``), hooks and device guard;
- ``_tensor``: an ``"hpu"`` tensor is a wrapper tensor subclass (:class:`HPUTensor`) around a tensor on the backing
  device;
- ``_dispatch``: its ``__torch_dispatch__`` runs each ATen operation on the backing tensors, with a plan per
  operation cached from the schema, torch's device rules, and explicit refusals;
- ``_factories``: ``torch.library`` kernels for PrivateUse1 make the factories (``device="hpu"``) work;
- ``_accounting``: exact memory accounting of the backing storages that enter the device
  (:func:`memory_snapshot`);
- ``_devices``: device indices and their backing devices.

**Device index.** Every tensor reports an index, as torch needs one. ``"hpu"`` without an index is ``hpu:0``: as on
Gaudi, where a process drives one card and its tensors report ``hpu:0`` whichever card it is, the card is chosen
outside torch's index (``set_device``; on the CUDA backing it picks the GPU, see ``_devices``). Tensors on ``hpu:N``
for ``N >= 1`` can be made and computed with, and mixing indices in one operation is torch's device error. Backward
runs on the calling thread in the thread that installed the device (``_install``), and there works through them too;
on other threads the autograd engine uses its device worker queues, and torch's Python device guard reports a single
device, so there is a queue for ``hpu:0`` only and torch fails an internal assertion for the others.

**Random numbers.** The emulated HPUs have no generator of their own: random operations on ``"hpu"`` draw from the
backing device's default generator (the CPU generator, or CUDA's), so ``torch.manual_seed(s)`` makes them
reproducible, and on the CPU backing ``torch.randn(n, device="hpu")`` equals ``torch.randn(n)`` drawn at the same
point. ``torch.Generator(device="hpu")`` does not exist (torch's Python backend hooks cannot provide generators);
a ``generator=`` argument must be a generator of the backing device.

**Serialization.** ``torch.save`` and ``pickle`` store an ``"hpu"`` tensor as a Gaudi does: its storage, tagged
``"hpu"``; ``torch.load`` restores it on ``"hpu"`` (without ``map_location`` too, as on Gaudi), or where
``map_location`` says (``map_location="cpu"`` gives CPU tensors). Tensors that shared a storage share one again.

**torch.compile.** ``torch.compile(model, backend="hpu_backend")`` compiles real graphs over ``"hpu"`` tensors, the
way torch compiles any traceable wrapper subclass (DTensor, ``TwoTensor``): dynamo fakeifies an :class:`HPUTensor`
through ``__tensor_flatten__`` (a wrapper around a fake backing tensor) and records the ATen-level graph;
AOTAutograd desugars the wrappers to their backing tensors and traces ``__torch_dispatch__`` with fake, functional
and proxy backing tensors into forward and backward graphs of the backing device, which Inductor compiles; the
outputs are wrapped again (``__tensor_unflatten__``, which records their storages as allocations). The dispatch keeps
its fast path for plain backing tensors; results that are traced tensors are wrapped without memory accounting, and
traced views are made to alias their input's wrapper (``_correct_storage_aliasing``) for AOTAutograd's alias
analysis. dynamo is told to skip the device layer's own frames (``_install._skip_in_dynamo``), which run eagerly
inside compiled regions around graph breaks. What does not compile: a tensor *created* on ``"hpu"`` inside the
compiled code (``torch.ones(..., device="hpu")``, ``torch.arange(n, device=x.device)``, ``cpu_tensor.to("hpu")``).
torch's fake tensor mode handles factories itself, before any kernel of the device, and makes them plain fake
tensors of device ``"hpu"``, not wrappers, which the dispatch cannot run and Inductor has no device for; both places
raise an error that says so (``_dispatch.UNTRACEABLE_FACTORY``) rather than fall back to eager. Create such tensors
from an ``"hpu"`` tensor (``x.new_ones``, ``torch.zeros_like``) or outside the compiled function.

**What a real Gaudi does differently.** There, ``"hpu"`` is c10's built-in ``DeviceType::HPU`` (not PrivateUse1),
the tensors are ordinary ``TensorImpl`` s with storage in device memory allocated by the Synapse runtime, kernels run
on the card (eagerly, or accumulated into graphs in lazy mode), streams and events exist, and the SDK keeps its own
generator. Here the wrapper has no storage of its own: ``untyped_storage()`` and ``data_ptr()`` of an ``"hpu"``
tensor answer with its backing memory (outside ``torch.compile``); in-place operations that change a tensor's shape,
strides or storage (``squeeze_``, ``t_``, ``resize_``, ``set_``, a resized ``out=`` tensor) give the wrapper new
metadata through torch's ``.data`` setter; sparse layouts are refused, as Gaudi has no sparse kernels;
``tensor.data = ...`` between the host and ``"hpu"`` swaps the tensor's implementation (torch swaps data between its
built-in dense devices only), which is refused while autograd may still use the tensor (``_host_data``); moving a
module from ``"hpu"`` to the host gives it new parameter objects (on Gaudi ``Module._apply`` keeps them);
page-locked host memory is ordinary host memory (see ``_pinned``); a storage restored to ``"hpu"`` by ``torch.load``
is a host storage presented as one of device ``"hpu"`` until the tensor is rebuilt on it (see ``_serialization``); and
the speed is the backing device's plus the cost of one Python call per operation.
"""

from __future__ import annotations

from ._accounting import AllocationStats, allocations
from ._devices import backing_of, current_index, hpu_device
from ._install import install, is_installed
from ._memory import MemorySnapshot, memory_snapshot, reset_peak
from ._tensor import HPUTensor, unwrap, wrap

__all__ = [
    "AllocationStats",
    "HPUTensor",
    "MemorySnapshot",
    "allocations",
    "backing_of",
    "current_index",
    "hpu_device",
    "install",
    "is_installed",
    "memory_snapshot",
    "reset_peak",
    "unwrap",
    "wrap",
]
