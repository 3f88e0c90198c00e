"""``__torch_dispatch__`` of the emulated ``"hpu"`` device: run each ATen operation on the backing tensors.

Every operation on an :class:`~._tensor.HPUTensor` arrives here after autograd (and the ADInplaceOrView key) has
done its work on the wrappers. :func:`run` looks up a *plan* for the operation, built once from its schema and
cached, so the per-call work is a dictionary lookup, one pass over the arguments and the wrapping of the results
(no pytree):

- **functional** operations (no alias in the returns): the results are new storages, recorded by the memory
  accounting and wrapped;
- **views** (returns alias an input, read-only): the results share the input's backing storage and are wrapped
  without being recorded;
- **mutating** operations (in-place and ``out=``: returns alias an input that is written): the operation runs on
  the backing tensors and the original argument objects are returned, so ``a.add_(b) is a``;
- operations that change a tensor's sizes, strides or storage in place (``squeeze_``, ``t_``, ``resize_``,
  ``as_strided_``, ``set_``, see :data:`METADATA_MUTATING`, and ``out=`` tensors the kernel resizes) run on a new
  alias of the backing tensor, and the wrapper then takes that alias's metadata through torch's ``.data`` setter
  (``set_data``, see :func:`_adopt`), which keeps the wrapper's identity, autograd history and version counter:
  ``matmul`` of a vector, ``quantile`` and ``stft``, which squeeze and transpose in place inside, work as on any
  device. ``x.set_(y)`` with ``y`` on the same HPU (torch FSDP shards with it) shares ``y``'s backing tensor.
- a result of a layout other than strided (sparse) is refused (:func:`~._tensor.layout_refusal`), as Gaudi has
  no sparse kernels;
- in a backward pass an operation that fails returns a stand-in instead of raising (see ``_tensor._BackwardError``),
  so that torch reports the error instead of aborting the process.

Devices follow torch's rules for real devices: all ``"hpu"`` tensors of one operation must be on the same index, a
tensor of another device may join only as a 0-dim CPU tensor (a "CPU scalar"), except in the operations that move
or index across devices (:data:`CROSS_DEVICE`); anything else is torch's own error, "Expected all tensors to be on
the same device". A ``device=`` keyword argument naming ``"hpu"`` is replaced by the backing device, and results
of an operation asked for another device (``_to_copy(..., device="cpu")``) are returned unwrapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._accounting import allocations, track, track_resized
from ._devices import DEVICE_TYPE, backing_of, hpu_device, index_of
from ._serialization import backing_storage
from ._tensor import HPUTensor, _copy_bits, layout_refusal, wrap

__all__ = ["CROSS_DEVICE", "METADATA_MUTATING", "UNTRACEABLE_FACTORY", "run"]

aten = torch.ops.aten

Plan = Callable[[Any, tuple[Any, ...], "dict[str, Any] | None"], Any]

CROSS_DEVICE = frozenset(
    {
        # Copies between devices.
        "aten::copy_",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::_to_copy",
        # Real devices accept host index tensors when indexing.
        "aten::index.Tensor",
        "aten::index_put_",
        "aten::index_put",
        "aten::_index_put_impl_",
    }
)
"""Operations (``name`` or ``name.overload``) that may mix ``"hpu"`` tensors with non-scalar tensors elsewhere."""

METADATA_MUTATING = frozenset(
    {
        "aten::resize_",
        "aten::resize_as_",
        "aten::_resize_output_",
        "aten::set_",
        "aten::as_strided_",
        "aten::squeeze_",
        "aten::unsqueeze_",
        "aten::transpose_",
        "aten::t_",
        "aten::swapdims_",
        "aten::swapaxes_",
    }
)
"""In-place operations that may change their input's sizes, strides or storage (see :func:`_adopt`)."""

STREAM_ONLY = frozenset({"aten::record_stream"})
"""Operations about streams only: the emulator runs all work in issue order, so they have nothing to do."""

UNTRACEABLE_FACTORY = (
    "torch.compile cannot trace a tensor created on the emulated 'hpu' device inside the compiled code (a factory "
    "such as torch.ones(..., device='hpu'), torch.arange(n, device=x.device) or tensor.to('hpu'), used in {func}): "
    "torch's fake tensors make it a plain tensor on 'hpu' instead of an emulated HPU tensor, which the emulator "
    "cannot compile. Create it from an 'hpu' tensor instead (x.new_ones(...), torch.ones_like(x), "
    "x.new_tensor(...)), or outside the compiled function and pass it in; on a real Gaudi this compiles."
)
"""Why an ``"hpu"`` factory inside ``torch.compile`` fails (see the package docstring)."""

_plans: dict[Any, Plan] = {}
_make_wrapper = torch.Tensor._make_wrapper_subclass
_DATA: Any = torch._C.TensorBase.data


def run(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    """Run ATen operation ``func`` with ``"hpu"`` tensors among its arguments on the backing device."""
    plan = _plans.get(func)
    if plan is None:
        plan = _plans[func] = _make_plan(func)
    return plan(func, args, kwargs)


# --- arguments ----------------------------------------------------------------------------------------------------

_SCALARS = frozenset({int, float, bool, complex, str, type(None), torch.SymInt, torch.SymFloat})


def _foreign(first: torch.device, tensor: torch.Tensor, func: Any) -> RuntimeError:
    if tensor.device.type == DEVICE_TYPE:
        # On "hpu" but not an HPUTensor: a tensor that torch.compile's fake tensors made from a factory call.
        return RuntimeError(UNTRACEABLE_FACTORY.format(func=func))
    return _mismatch(first, tensor.device, func)


def _mismatch(first: torch.device, other: torch.device, func: Any) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {other}! (when checking arguments for {func})"
    )


def _unwrap_seq(
    seq: Any, func: Any, cross_device: bool, device: torch.device | None
) -> tuple[list[Any], torch.device | None, torch.Tensor | None]:
    """Replace the ``"hpu"`` tensors in ``seq`` (and in tensor lists in it) by their backing tensors.

    Returns the new list, the device of the ``"hpu"`` tensors met (``device`` if none) and the first tensor of another
    device that is not a CPU scalar (``None`` if none, or if ``cross_device``).
    """
    out: list[Any] = []
    append = out.append
    foreign = None
    for a in seq:
        cls = type(a)
        if cls is HPUTensor:
            if device is None:
                device = a.device
            elif a.device != device:
                raise _mismatch(device, a.device, func)
            append(a._elem)
        elif cls in _SCALARS:
            append(a)
        elif cls is list or cls is tuple:
            if a and (type(a[0]) not in _SCALARS or type(a[-1]) not in _SCALARS):
                items, device, inner = _unwrap_seq(a, func, cross_device, device)
                foreign = foreign if foreign is not None else inner
                append(cls(items))
            else:
                append(a)
        elif isinstance(a, torch.Tensor):
            # A CPU scalar joins any device's operation, as in TensorIterator; other tensors must be on "hpu".
            if foreign is None and not cross_device and (a.dim() != 0 or not a.is_cpu):
                foreign = a
            append(a)
        else:
            append(a)
    return out, device, foreign


def _unwrap(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, cross_device: bool
) -> tuple[list[Any], dict[str, Any], torch.device | None]:
    new_args, device, foreign = _unwrap_seq(args, func, cross_device, None)
    new_kwargs: dict[str, Any] = {}
    if kwargs:
        values, device, other = _unwrap_seq(kwargs.values(), func, cross_device, device)
        foreign = foreign if foreign is not None else other
        new_kwargs = dict(zip(kwargs, values, strict=True))
    if foreign is not None and device is not None:
        raise _foreign(device, foreign, func)
    return new_args, new_kwargs, device


def _target_device(kwargs: dict[str, Any], default: torch.device | None) -> torch.device | None:
    """Rewrite an ``"hpu"`` ``device=`` to its backing device; the device the results belong to (``None``: host)."""
    target = kwargs.get("device")
    if target is None:
        return default
    target = torch.device(target)
    if target.type != DEVICE_TYPE:
        return None
    index = index_of(target)
    kwargs["device"] = backing_of(index)
    return hpu_device(index)


# --- results ------------------------------------------------------------------------------------------------------


def _wrap_new(out: Any, device: torch.device) -> Any:
    if type(out) is torch.Tensor:
        track(out, device.index)
        return wrap(out, device)
    if type(out) is tuple or type(out) is list:
        return type(out)(_wrap_new(o, device) for o in out)
    if isinstance(out, torch.Tensor):
        # A traced result (FakeTensor, FunctionalTensor): no memory, nothing to record.
        return wrap(out, device)
    return out


def _wrap_view(out: Any, device: torch.device) -> Any:
    if type(out) is torch.Tensor or isinstance(out, torch.Tensor):
        return wrap(out, device)
    if type(out) is tuple or type(out) is list:
        return type(out)(_wrap_view(o, device) for o in out)
    return out


def _is_traced(out: Any) -> bool:
    """Whether the backing result ``out`` (a tensor, or a sequence of them) is a traced tensor, not data."""
    if type(out) is tuple or type(out) is list:
        return any(_is_traced(o) for o in out)
    return isinstance(out, torch.Tensor) and type(out) is not torch.Tensor


def _traced_view(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, result: Any) -> Any:
    """Make the wrappers of a traced view alias their input's wrapper, as AOTAutograd's alias analysis expects."""
    from torch.utils._python_dispatch import _correct_storage_aliasing, get_alias_info

    _correct_storage_aliasing(func, get_alias_info(func), args, result if type(result) is tuple else (result,))
    return result


# --- plans --------------------------------------------------------------------------------------------------------


def _qualified(func: Any) -> tuple[str, str]:
    schema = func._schema
    return schema.name, f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _stream_plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    return None


def _make_plan(func: Any) -> Plan:
    schema = func._schema
    name, full = _qualified(func)
    cross_device = name in CROSS_DEVICE or full in CROSS_DEVICE
    if full == "aten::set_.source_Tensor":
        return _set_from_tensor_plan
    if name in METADATA_MUTATING:
        return _metadata_plan(cross_device)
    if name in STREAM_ONLY:
        return _stream_plan
    written: dict[Any, tuple[int, str, bool]] = {}
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and info.is_write:
            for alias_set in info.before_set:
                written[alias_set] = (position, argument.name, argument.kwarg_only)
    returns: list[tuple[int, str, bool] | None] = []
    views = False
    for ret in schema.returns:
        info = ret.alias_info
        if info is None:
            returns.append(None)
        elif info.is_write:
            returns.append(next((written[s] for s in info.before_set if s in written), None))
        else:
            returns.append(None)
            views = True
    if any(r is not None for r in returns):
        return _mutating_plan(returns, cross_device)
    if written:
        # Mutates inputs but returns nothing that aliases them (the _foreach_*_ operations, fused optimizers).
        return _void_mutating_plan(cross_device, any(kw for _, _, kw in written.values()))
    if views:
        return _view_plan(func, cross_device)
    return _functional_plan(func, cross_device)


def _functional_plan(func: Any, cross_device: bool) -> Plan:
    op = func._op  # the C++ callable: skips OpOverload.__call__'s Python frame
    live = allocations._live
    record = allocations.record

    def plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        if kwargs:
            new_args, new_kwargs, device = _unwrap(func, args, kwargs, cross_device)
            if "device" in new_kwargs:
                device = _target_device(new_kwargs, device)
            out = op(*new_args, **new_kwargs)
        else:
            new_args, device, foreign = _unwrap_seq(args, func, cross_device, None)
            if foreign is not None and device is not None:
                raise _foreign(device, foreign, func)
            out = op(*new_args)
        if device is None:
            return out
        if type(out) is torch.Tensor:
            # The common case inlined: record the new storage, wrap it.
            try:
                storage = out.untyped_storage()
            except NotImplementedError:
                raise layout_refusal(out.layout, f"the result of {func}") from None
            if storage._cdata not in live:
                record(storage, device.index)
            result = _make_wrapper(
                HPUTensor,
                out.size(),
                strides=out.stride(),
                storage_offset=out.storage_offset(),
                dtype=out.dtype,
                device=device,
                requires_grad=False,
            )
            result._elem = out  # a new result is never a lazy conjugate or negative view: no bits to copy
            return result
        return _wrap_new(out, device)

    return plan


def _view_plan(func: Any, cross_device: bool) -> Plan:
    op = func._op

    def plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        if kwargs:
            new_args, new_kwargs, device = _unwrap(func, args, kwargs, cross_device)
            out = op(*new_args, **new_kwargs)
        else:
            new_args, device, foreign = _unwrap_seq(args, func, cross_device, None)
            if foreign is not None and device is not None:
                raise _foreign(device, foreign, func)
            out = op(*new_args)
        if device is None:
            return out
        if type(out) is torch.Tensor:
            # wrap() inlined: this runs for every view.
            result = _make_wrapper(
                HPUTensor,
                out.size(),
                strides=out.stride(),
                storage_offset=out.storage_offset(),
                dtype=out.dtype,
                device=device,
                requires_grad=False,
            )
            result._elem = out
            if out.is_conj() or out.is_neg():
                _copy_bits(out, result)
            return result
        if _is_traced(out):
            return _traced_view(func, args, kwargs, _wrap_view(out, device))
        return _wrap_view(out, device)

    return plan


def _mutating_plan(returns: list[tuple[int, str, bool] | None], cross_device: bool) -> Plan:
    # Outputs passed as keyword-only arguments (out=) may be resized by the kernel; in-place `self` never is.
    out_style = any(r is not None and r[2] for r in returns)
    single = returns[0] if len(returns) == 1 else None

    def original(spec: tuple[int, str, bool], args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        position, name, kwarg_only = spec
        if kwarg_only or position >= len(args):
            return kwargs[name] if kwargs else None
        return args[position]

    def plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        new_args, new_kwargs, device = _unwrap(func, args, kwargs, cross_device)
        out = func._op(*new_args, **new_kwargs)
        if single is not None:
            result = original(single, args, kwargs)
            if out_style:
                _adopt_outputs(func, result)
            return result
        results = []
        for spec, value in zip(returns, out if isinstance(out, (tuple, list)) else (out,), strict=False):
            if spec is None:
                results.append(value if device is None else _wrap_new(value, device))
            else:
                result = original(spec, args, kwargs)
                if out_style:
                    _adopt_outputs(func, result)
                results.append(result)
        return tuple(results) if isinstance(out, tuple) else results

    return plan


def _void_mutating_plan(cross_device: bool, out_style: bool) -> Plan:
    def plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        new_args, new_kwargs, device = _unwrap(func, args, kwargs, cross_device)
        out = func._op(*new_args, **new_kwargs)
        if out_style:
            for value in (kwargs or {}).values():
                _adopt_outputs(func, value)
        if device is None or out is None:
            return out
        return _wrap_new(out, device)

    return plan


def _metadata_plan(cross_device: bool) -> Plan:
    def plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        target = args[0]
        new_args, new_kwargs, _ = _unwrap(func, args, kwargs, cross_device)
        if type(target) is not HPUTensor:
            return func._op(*new_args, **new_kwargs)
        # Run on a fresh alias of the backing tensor, never on `_elem` itself: `.data` and `detach()` wrappers share
        # the `_elem` object, and they keep their own metadata, as on a real device.
        elem = target._elem
        alias = elem.as_strided(elem.size(), elem.stride(), elem.storage_offset())
        new_args[0] = alias
        if len(new_args) > 1 and isinstance(new_args[1], torch.UntypedStorage):
            # x.set_(storage, ...): a storage of "hpu" (torch.load's rebuild of a tensor restored to "hpu") stands for
            # its backing storage.
            new_args[1] = backing_storage(new_args[1]) or new_args[1]
        func._op(*new_args, **new_kwargs)
        _adopt(target, alias)
        return target

    return plan


def _adopt(target: HPUTensor, elem: torch.Tensor) -> None:
    """Make ``target`` describe ``elem`` (its sizes, strides, offset and storage) after an in-place metadata change.

    A wrapper's metadata cannot be changed from inside ``__torch_dispatch__`` by the operation itself, but torch's
    ``.data`` setter (``set_data``) copies a TensorImpl's metadata into another of the same kind while keeping the
    target's identity, autograd history and version counter: ``target`` takes the metadata of a new wrapper of
    ``elem``, as ``squeeze_``, ``t_``, ``resize_``, ``as_strided_`` or ``set_`` change a tensor on any device.
    """
    if (
        elem.size() != target.size()
        or elem.stride() != target.stride()
        or elem.storage_offset() != target.storage_offset()
        or elem.dtype != target.dtype
    ):
        _DATA.__set__(target, wrap(elem, target.device))
    target._elem = elem
    if type(elem) is torch.Tensor:  # a traced tensor has no memory to record
        track_resized(elem, target.device.index)


def _set_from_tensor_plan(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    # x.set_(y): x takes y's storage, sizes and strides, as on any real device (torch FSDP shards its flat parameter
    # with it). See _adopt for how a wrapper takes new metadata.
    target = args[0]
    source = args[1] if len(args) > 1 else (kwargs or {})["source"]
    if type(target) is not HPUTensor or type(source) is not HPUTensor:
        new_args, new_kwargs, _ = _unwrap(func, args, kwargs, False)  # torch's own device error
        return func._op(*new_args, **new_kwargs)
    if source.device != target.device:
        raise _mismatch(target.device, source.device, func)
    if source.dtype != target.dtype:
        raise RuntimeError(
            f"Could not set tensor of type {source.dtype} to a tensor of type {target.dtype} (when running {func})"
        )
    _DATA.__set__(target, source)
    target._elem = source._elem
    return target


def _adopt_outputs(func: Any, value: Any) -> None:
    """After an ``out=`` operation: an output the kernel resized takes its new metadata (see :func:`_adopt`)."""
    if type(value) is HPUTensor:
        _adopt(value, value._elem)
    elif type(value) is list or type(value) is tuple:
        for v in value:
            _adopt_outputs(func, v)
