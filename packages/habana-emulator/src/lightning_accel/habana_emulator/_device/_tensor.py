"""The tensors of the emulated ``"hpu"`` device: wrapper tensors around a tensor on the backing device.

An :class:`HPUTensor` is made with ``torch.Tensor._make_wrapper_subclass``: to torch it is a tensor of device type
``"hpu"`` (PrivateUse1 renamed) with its own sizes, strides, dtype and autograd state, but without storage. The
data lives in ``_elem``, a plain tensor on the backing device (the CPU, or the CUDA GPU chosen by
``LIGHTNING_ACCEL_EMULATE_BACKEND``) with the same sizes, strides and storage offset. Every ATen operation that
reaches the ``Python`` dispatch key of such a tensor (after autograd has recorded it) goes to
:func:`._dispatch.run`, which runs the operation on the ``_elem`` tensors and wraps the results.

Views are views of the backing tensor, so a view and its base share memory exactly as on a real device: an in-place
operation on a view changes the base. autograd's view tracking and version counters work on the wrappers as on any
tensor.

What a real Gaudi does differently: an HPU tensor there is a ``TensorImpl`` of device type ``HPU`` (a built-in
device type of c10, not PrivateUse1) with a storage in device memory allocated by the Synapse runtime, so
``untyped_storage()`` and ``data_ptr()`` describe device memory. Here the wrapper has no storage of its own:
``untyped_storage()`` and ``data_ptr()`` answer with the backing tensor's memory (outside ``torch.compile``).
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types
from collections import OrderedDict
from typing import Any

import torch

from ._accounting import resized, track
from ._host_data import give_host_data

__all__ = ["HPUTensor", "layout_refusal", "unwrap", "wrap"]

_make_wrapper = torch.Tensor._make_wrapper_subclass
_current_graph_task_id = torch._C._current_graph_task_id
_DATA: Any = torch._C.TensorBase.data


class HPUTensor(torch.Tensor):
    """A tensor on the emulated ``"hpu"`` device; its data is the backing tensor ``_elem``.

    Build one with :func:`wrap`, or through torch (``torch.randn(..., device="hpu")``, ``tensor.to("hpu")``).
    """

    _elem: torch.Tensor

    # torch functions reach __torch_dispatch__ anyway; handling them here too would cost a Python call per op.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        plan = _plans.get(func)
        try:
            if plan is None:
                return _run(func, args, kwargs)
            return plan(func, args, kwargs)
        except Exception as exc:
            if _current_graph_task_id() == -1:
                raise
            # In a backward pass, see _BackwardError.
            error = _BackwardError(func, exc)
            returns = len(func._schema.returns)
            return tuple(error for _ in range(returns)) if returns > 1 else error

    # Being a "traceable wrapper subclass" makes Module._apply (module.to("hpu"), .half()) swap the contents of each
    # parameter object instead of replacing it, so the objects an optimizer already holds stay the model's, as when
    # a model moves to a real device. torch.compile needs it too. See _Flatten for the one case where it is hidden.
    def _flatten(self) -> tuple[list[str], torch.device]:
        return ["_elem"], self.device

    @staticmethod
    def __tensor_unflatten__(
        inner_tensors: dict[str, torch.Tensor], device: torch.device, outer_size: Any, outer_stride: Any
    ) -> HPUTensor:
        # AOTAutograd re-wraps the outputs of a compiled graph here: their new storages are device allocations. Traced
        # inner tensors (dynamo's fake inputs) have no memory.
        elem = inner_tensors["_elem"]
        if type(elem) is torch.Tensor:
            track(elem, device.index)
        return wrap(elem, device)

    def _stable_hash_for_caching(self) -> str:
        # AOTAutograd's cache key for a traceable wrapper subclass input (torch warns when a subclass has none).
        elem = self._elem
        key = (
            f"HPUTensor|{self.device}|{elem.device}|{self.dtype}|{tuple(self.shape)}|{tuple(self.stride())}|"
            f"{self.requires_grad}"
        )
        return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()

    def __reduce_ex__(self, proto: Any) -> Any:
        # Pickle as a device tensor is pickled on Gaudi: the backing storage, which ._serialization tags "hpu", and
        # torch's own rebuild function (allowed by weights_only loads), so that any map_location works, DeepSpeed's
        # `lambda storage, loc: storage` included. torch's default would pickle this class and its __dict__.
        if getattr(self, "_is_param", False):
            return (torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, OrderedDict()))
        elem = self._elem
        args = (elem._typed_storage(), elem.storage_offset(), tuple(elem.size()), elem.stride(), self.requires_grad)
        return (torch._utils._rebuild_tensor_v2, (*args, OrderedDict()))

    def __format__(self, format_spec: str) -> str:
        # torch.Tensor.__format__ formats 0-dim tensors as numbers only for exact torch.Tensor; printing needs it.
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        # torch prints a subclass as "HPUTensor(...)" (and a parameter as "Parameter(HPUTensor(...))"); a real HPU
        # tensor prints as "tensor(..., device='hpu:0')", with "Parameter containing:" above a parameter.
        elem = self.__dict__.get("_elem")
        if type(elem) is not torch.Tensor:
            # A wrapper being made, or one that torch.compile traces (fake inner tensor): there is no data to print.
            inner = "none" if elem is None else type(elem).__name__
            return f"HPUTensor(size={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}', inner={inner})"
        text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        is_param = text.startswith("Parameter(")
        if is_param:
            text = text[len("Parameter(") : -1]
        own = f"{type(self).__name__}("
        if text.startswith(own):
            text = "tensor(" + _dedent(text[len(own) :], len(own) - len("tensor("))
        return "Parameter containing:\n" + text if is_param else text

    @property
    def data(self) -> torch.Tensor:
        """The tensor without autograd history, sharing its data (as ``torch.Tensor.data``)."""
        return _DATA.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        # torch's setter copies the TensorImpl's metadata but knows nothing of _elem, which would keep the old data.
        if value.device.type == "cpu":
            # A Gaudi takes host data here (HPU is one of torch's built-in dense devices); see _host_data.
            give_host_data(self, value)
            return
        try:
            _DATA.__set__(self, value)
        except RuntimeError as exc:
            if "incompatible tensor type" not in str(exc):
                raise
            # torch swaps data between its built-in dense devices only (TensorImpl::has_compatible_shallow_copy_type),
            # and PrivateUse1 is not one of them.
            raise NotImplementedError(
                f"An 'hpu' tensor cannot take a {value.device} tensor through `tensor.data = ...` on the emulated "
                "HPU: it is a PrivateUse1 device, and torch swaps data between its built-in dense devices only; the "
                "emulator takes 'hpu' and host ('cpu') tensors there."
            ) from exc
        self._elem = value._elem if type(value) is HPUTensor else value

    def _typed_storage(self) -> torch.TypedStorage:
        # torch FSDP frees and reallocates device memory by resizing a tensor's storage in place
        # (`tensor._typed_storage()._resize_(n)`), which no operation reaches: the accounting is told here.
        storage = super()._typed_storage()
        resize, index = storage._resize_, self.device.index

        def _resize_(size: int) -> None:
            resize(size)
            resized(storage._untyped_storage, index)

        storage._resize_ = _resize_
        return storage

    def numpy(self, *, force: bool = False) -> Any:
        """Refused as for any device tensor: copy it to the host first."""
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
            "memory first."
        )

    def untyped_storage(self) -> torch.UntypedStorage:
        """The backing tensor's storage: the memory this tensor uses (its size and address, on the backing device)."""
        # The wrapper has none of its own. Python code that measures or deduplicates memory (DeepSpeed, profilers)
        # needs the real one; torch.compile's tracing needs the wrapper's own (it must stay a separate tensor there).
        if torch.compiler.is_compiling():
            return super().untyped_storage()
        return self._elem.untyped_storage()

    def data_ptr(self) -> int:
        """The address of the first element in the backing memory (the wrapper has none of its own)."""
        return self._elem.data_ptr()

    def register_hook(self, hook: Any) -> Any:
        """As ``torch.Tensor.register_hook``; an exception the hook raises in a backward pass is reported, not fatal."""
        return super().register_hook(_guarded_hook(hook))

    def register_post_accumulate_grad_hook(self, hook: Any) -> Any:
        """As ``torch.Tensor.register_post_accumulate_grad_hook``, with the hook guarded as in :meth:`register_hook`."""
        return super().register_post_accumulate_grad_hook(_guarded_hook(hook))

    def tolist(self) -> Any:
        """The data as nested Python lists, read through the host as on a real device."""
        # torch's C++ tolist refuses tensor subclasses; the backing tensor has the same shape and data.
        return self._elem.tolist()


class _BackwardError:
    """What ``__torch_dispatch__`` returns instead of raising while the autograd engine runs a backward pass.

    An exception raised in ``__torch_dispatch__`` stays pending in the interpreter while torch unwinds its C++ frames
    (``python_error``), and in a backward pass those frames include the engine's stream guard for the PrivateUse1
    device, whose destructor calls the Python device guard: with the exception pending that call fails inside a
    ``noexcept`` function and the process aborts ("terminate called without an active exception"). Returned instead
    of a result, this object makes torch fail in C++ while converting it, with no Python exception pending: the
    conversion error (a ``RuntimeError`` where the backward was started: "Unable to cast [...] to Tensor") quotes
    ``str()`` of this object, which names the operation and the original exception.
    """

    __slots__ = ("text",)

    def __init__(self, func: Any, exc: BaseException) -> None:
        self.text = f"[{func} failed on the emulated HPU in this backward pass with {type(exc).__name__}: {exc}]"

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _guarded_hook(hook: Any) -> Any:
    """``hook``, made to report an exception it raises in a backward pass at the end of that pass instead.

    torch calls tensor hooks from C++ and leaves their exception pending, which the PrivateUse1 stream guard turns
    into an abort (see :class:`_BackwardError`). Instead, the guarded hook returns ``None`` (the gradient stays as it
    was) and queues a callback on the autograd engine that raises the hook's exception when the pass ends: torch
    keeps a callback's exception safely and raises it, type and message unchanged, where the backward was called.
    """

    @functools.wraps(hook)
    def guarded(*args: Any) -> Any:
        try:
            return hook(*args)
        except Exception as exc:
            if _current_graph_task_id() == -1:
                raise
            _raise_after_backward(exc)
            return None

    return guarded


def _raise_after_backward(exc: BaseException) -> None:
    def reraise() -> None:
        raise exc

    torch.autograd.Variable._execution_engine.queue_callback(reraise)


class _Flatten:
    """``HPUTensor.__tensor_flatten__``, hidden from ``Module._apply`` for parameters already on ``"hpu"``.

    ``Module._apply`` swaps the contents of a traceable subclass parameter (``torch.utils.swap_tensors``), which torch
    refuses for an object with weak references (DeepSpeed keeps a finalizer on every parameter) or other references
    (an HPU graph holds its parameters). On Gaudi a move or cast of a parameter already on the HPU is
    ``param.data = new`` (the tensors have compatible types), which the wrapper supports. So when ``Module._apply``
    asks about a parameter that is an ``"hpu"`` tensor already, the subclass does not look traceable and torch takes
    that path, as on hardware; everywhere else (``torch.compile``, moves from the host) it is traceable.
    """

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return HPUTensor._flatten
        # hasattr() <- _has_traceable_wrapper_subclass_protocol <- is_traceable_wrapper_subclass <- Module._apply
        frame: types.FrameType | None = sys._getframe(1)
        for _ in range(3):
            if frame is None:
                break
            if frame.f_code is _MODULE_APPLY:
                param = frame.f_locals.get("param")
                if type(param) is HPUTensor:
                    raise AttributeError("__tensor_flatten__")
                break
            frame = frame.f_back
        return HPUTensor._flatten.__get__(obj, owner)


HPUTensor.__tensor_flatten__ = _Flatten()  # type: ignore[attr-defined]
_MODULE_APPLY = torch.nn.Module._apply.__code__


def _dedent(text: str, width: int) -> str:
    lines = text.split("\n")
    return "\n".join(lines[:1] + [line[width:] if line[:width].isspace() else line for line in lines[1:]])


def wrap(elem: torch.Tensor, device: torch.device) -> HPUTensor:
    """An ``"hpu"`` tensor on ``device`` whose data is ``elem`` (shared, not copied).

    ``elem`` must be a strided tensor on the backing device of ``device``; no memory is recorded (see
    :func:`._accounting.track`).

    Raises:
        NotImplementedError: When ``elem`` has a sparse layout (see :func:`layout_refusal`).
    """
    if elem.layout is not torch.strided:
        raise layout_refusal(elem.layout)
    out: HPUTensor = _make_wrapper(
        HPUTensor,
        elem.size(),
        strides=elem.stride(),
        storage_offset=elem.storage_offset(),
        dtype=elem.dtype,
        device=device,
        requires_grad=False,
    )
    out._elem = elem
    if elem.is_conj() or elem.is_neg():
        _copy_bits(elem, out)
    return out


def _copy_bits(elem: torch.Tensor, out: torch.Tensor) -> None:
    # The conjugate and negative bits are part of a tensor's metadata (lazy views: x.conj(), x.conj().imag), which
    # _make_wrapper_subclass does not copy; the wrapper must carry them, since autograd and the ops above the Python
    # key read them from it (view_as_real refuses a conjugated tensor, resolve_conj copies one).
    torch._C._set_conj(out, elem.is_conj())
    torch._C._set_neg(out, elem.is_neg())


def layout_refusal(layout: torch.layout, what: str = "") -> NotImplementedError:
    """The error for a tensor of a layout other than ``torch.strided`` on the emulated ``"hpu"``.

    The Gaudi SDK registers no sparse kernels: on Gaudi, making a sparse HPU tensor fails in torch's dispatcher with
    ``NotImplementedError: Could not run 'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments from the
    'SparseHPU' backend``. The emulated device refuses such tensors with the same exception type, and says why.
    """
    source = f" ({what})" if what else ""
    return NotImplementedError(
        f"A tensor of layout {layout}{source} cannot be on the emulated HPU device, which holds strided (dense) "
        "tensors only, as Gaudi does: the Gaudi SDK has no sparse kernels, and torch refuses sparse HPU tensors there "
        "('Could not run ... with arguments from the SparseHPU backend'). Keep sparse tensors on the host, or make "
        "them dense (x.to_dense()) before moving them to 'hpu'."
    )


def unwrap(tensor: torch.Tensor) -> torch.Tensor:
    """The backing tensor of an ``"hpu"`` tensor (sharing its memory); other tensors are returned as they are."""
    if type(tensor) is HPUTensor:
        return tensor._elem
    return tensor


from ._dispatch import _plans  # noqa: E402
from ._dispatch import run as _run  # noqa: E402  (the dispatcher needs HPUTensor and wrap defined first)
