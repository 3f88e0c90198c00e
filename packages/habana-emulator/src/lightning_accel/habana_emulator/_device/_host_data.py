"""``hpu_tensor.data = host_tensor`` and back: the swap torch allows between its built-in devices, on the wrapper.

On a Gaudi ``"hpu"`` is c10's built-in ``DeviceType::HPU``, which ``TensorImpl::has_compatible_shallow_copy_type``
lists with CPU, CUDA, MPS, HIP and XPU: a tensor object there can take host data through ``tensor.data = ...`` and
device data again later, keeping its identity, its ``requires_grad`` and its Python attributes. torch FSDP relies on
it to gather a full state dict to the host unit by unit (``FlatParamHandle.to_cpu``: ``flat_param.data =
flat_param.to("cpu")``, then back to the device) when ``offload_to_cpu=True``, as Lightning asks.

An emulated ``"hpu"`` tensor is a PrivateUse1 wrapper, which torch refuses to give host data. The emulator does the
same swap one level down: the object's ``TensorImpl`` is exchanged for a host one (``torch._C._swap_tensor_impl``,
what ``torch.utils.swap_tensors`` uses), and the device ``TensorImpl`` is kept aside, holding no device memory, so
that the way back (``tensor.data = hpu_tensor``) restores it. Anything that refers to the object's implementation
from C++ (the autograd graph's ``AccumulateGrad`` node, hooks) therefore finds it again afterwards, and a parameter
trains on after its data went to the host and came back.

Views made before the swap keep the old data, as views do on a Gaudi. The swap is refused (``NotImplementedError``)
where autograd may use the device implementation: during a backward pass, and with grad mode on while anything else
holds the tensor (views, saved tensors, its ``AccumulateGrad`` node), since a backward pass still to come would miss
it (``torch.utils.swap_tensors`` refuses such swaps for that reason). torch FSDP's full state dicts swap under
``torch.no_grad()`` (or parameters nothing else holds), which runs; its ``cpu_offload=True`` swaps flat parameters
that autograd holds, so that stays a clear error on the emulator.

What differs from a Gaudi while the data is on the host: the object's class is :class:`HostDataTensor` (a Gaudi
keeps the class), and its ``.grad`` and autograd hooks are those of the device implementation kept aside, so they are
not visible until the data is back on the device.

A tensor born on the host takes ``"hpu"`` data the same way (torch FSDP moves each unit of a host model to the device
so, ``tensor.data = tensor.to(device_id)``, before it shards the unit): torch decides such a swap in its own C
setter, which the device cannot reach for a plain tensor, so :func:`register` puts a ``data`` descriptor on
``torch.Tensor`` that hands host tensors (and parameters) taking ``"hpu"`` data to :func:`give_device_data_to_host`
and everything else to torch's setter. The object becomes an :class:`HPUTensor` (a parameter stays a
``torch.nn.Parameter``), with the same refusal while autograd may use it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

__all__ = ["HostDataTensor", "give_device_data", "give_device_data_to_host", "give_host_data", "register"]

_DATA: Any = torch._C.TensorBase.data
_PARKED = "_lightning_accel_hpu_impl"


class HostDataTensor(torch.Tensor):
    """An ``"hpu"`` tensor object whose data went to the host through ``tensor.data = host_tensor``.

    It is an ordinary host tensor until it takes device data again (``tensor.data = hpu_tensor``), which makes it the
    ``"hpu"`` tensor it was, with the new data.
    """

    # Results of operations on it are plain host tensors, as for any parameter on the host.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @property
    def data(self) -> torch.Tensor:
        """The tensor without autograd history, sharing its data (as ``torch.Tensor.data``)."""
        return _DATA.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if value.device.type == "hpu" and _PARKED in self.__dict__:
            give_device_data(self, value)
        else:
            _DATA.__set__(self, value)

    def __reduce_ex__(self, proto: Any) -> Any:
        # Pickled as the host tensor (or parameter) it is, not as this class.
        if getattr(self, "_is_param", False):
            return (torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, OrderedDict()))
        return self.detach().__reduce_ex__(proto)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text = repr(self.detach())
        return "Parameter containing:\n" + text if getattr(self, "_is_param", False) else text


def give_host_data(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """``tensor.data = value`` for an ``"hpu"`` tensor and a host ``value``: ``tensor`` becomes a host tensor.

    The device implementation is kept aside with no data (an empty device tensor), so the memory it held is freed
    when nothing else uses it, as on a device.
    """
    from ._tensor import HPUTensor, wrap

    _refuse_under_autograd(tensor, value)
    host = value.detach()
    if tensor.requires_grad and (host.is_floating_point() or host.is_complex()):
        host.requires_grad_(True)
    elem = tensor.__dict__.pop("_elem")
    device = tensor.device
    torch._C._swap_tensor_impl(tensor, host)
    # `host` is now the Python object of the device implementation: make it the wrapper it belongs to, holding nothing.
    parked: Any = host
    parked.__class__ = HPUTensor
    empty = wrap(elem.new_empty(0), device)
    _DATA.__set__(parked, empty)
    parked._elem = empty._elem
    tensor.__class__ = HostDataTensor
    tensor.__dict__[_PARKED] = parked


def give_device_data(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """``tensor.data = value`` for a :class:`HostDataTensor` and an ``"hpu"`` ``value``: the device tensor again."""
    from ._tensor import HPUTensor

    parked = tensor.__dict__.pop(_PARKED)
    parked.data = value  # an "hpu" tensor taking "hpu" data: torch's own setter
    torch._C._swap_tensor_impl(tensor, parked)
    tensor.__class__ = HPUTensor
    tensor.__dict__["_elem"] = parked.__dict__.pop("_elem")
    host: Any = parked
    host.__class__ = torch.Tensor


def give_device_data_to_host(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """``tensor.data = value`` for a host tensor born there and an ``"hpu"`` ``value``: ``tensor`` becomes the latter.

    The object keeps its identity, ``requires_grad`` and Python attributes; a parameter stays a parameter (an
    ``"hpu"`` parameter is an :class:`HPUTensor` marked ``_is_param``, as torch makes parameters of wrapper tensors).
    """
    from ._tensor import HPUTensor

    _refuse_under_autograd(tensor, value)
    device = value.detach()
    if tensor.requires_grad:
        device.requires_grad_(True)
    is_param, grad = isinstance(tensor, torch.nn.Parameter), tensor.grad
    torch._C._swap_tensor_impl(tensor, device)
    tensor.__class__ = HPUTensor
    tensor.__dict__["_elem"] = device.__dict__.pop("_elem")
    if is_param:
        tensor.__dict__["_is_param"] = True
    if grad is not None:
        # A Gaudi keeps the host gradient until it is moved too (torch FSDP does so next); torch refuses a parameter
        # a gradient of another device, so here it moves with the data.
        tensor.grad = grad.to(value.device)
    # `device` now holds the host implementation, which nothing refers to any more.
    host: Any = device
    host.__class__ = torch.Tensor


def _refuse_under_autograd(tensor: torch.Tensor, value: torch.Tensor) -> None:
    holders = tensor._use_count() - 1  # type: ignore[attr-defined]
    if torch._C._current_graph_task_id() != -1 or (torch.is_grad_enabled() and holders):
        # A backward pass running now, or one still to come for a graph recorded with this tensor (grad mode on and
        # something holds it: views, saved tensors, its AccumulateGrad node), would use the implementation the swap
        # takes away. torch.utils.swap_tensors refuses such swaps for the same reason.
        raise NotImplementedError(
            f"A tensor on {tensor.device} cannot take a tensor on {value.device} through `tensor.data = ...` on the "
            f"emulated HPU while autograd may use it ({holders} other reference(s) with grad mode on, or a backward "
            "pass running): the emulated HPU is a PrivateUse1 device, which torch does not let swap data with the "
            "host, so the emulator swaps the tensor's implementation, which autograd would then miss. On a Gaudi "
            "this runs. torch FSDP's cpu_offload=True does it and cannot run on the emulator; full state dicts "
            "gathered with offload_to_cpu=True can, and FSDP moves a model that has not run a backward pass yet."
        )


class _TensorData:
    """``torch.Tensor.data`` on the emulator: torch's getter and setter, and host tensors taking ``"hpu"`` data."""

    def __get__(self, tensor: torch.Tensor | None, owner: type | None = None) -> Any:
        if tensor is None:
            return self
        return _DATA.__get__(tensor, owner)

    def __set__(self, tensor: torch.Tensor, value: torch.Tensor) -> None:
        from ._tensor import HPUTensor

        if (
            type(value) is HPUTensor
            and type(tensor) in (torch.Tensor, torch.nn.Parameter)
            and tensor.device.type == "cpu"
        ):
            give_device_data_to_host(tensor, value)
        else:
            _DATA.__set__(tensor, value)


def register() -> None:
    """Let host tensors take ``"hpu"`` data through ``tensor.data = ...``, as on a Gaudi (see the module)."""
    if not isinstance(torch.Tensor.__dict__.get("data"), _TensorData):
        # NOT an SDK load effect: on Gaudi, `param.data = hpu_tensor` works natively (HPU is c10's own device type).
        # A limit of this Python wrapper device, which issue 28 deletes: on lightning_accel.emulated_hpu it is native.
        torch.Tensor.data = _TensorData()  # type: ignore[assignment]
