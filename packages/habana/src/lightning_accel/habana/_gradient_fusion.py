"""One flat gradient buffer all-reduced in one collective: the core of optimum-habana's ``fast_ddp``.

Shared by the Trainer strategy (:mod:`lightning_accel.habana.strategies.fast_ddp`) and the Fabric strategy
(:mod:`lightning_accel.habana.fabric.fast_ddp`), so it imports torch, the core and the SDK seam only, no Lightning tree.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import Tensor

from lightning_accel.core.errors import ConfigurationError

from . import sdk

__all__ = [
    "BUFFER_DTYPES",
    "GradientFusion",
    "broadcast_from_rank_zero",
    "check_fast_ddp_arguments",
    "graphs_for_mode",
    "report_graphs",
]

#: The buffer dtypes accepted: HCCL reduces both natively.
BUFFER_DTYPES = (torch.float32, torch.bfloat16)


class GradientFusion:
    """One flat buffer holding every gradient of a module, all-reduced in one collective.

    The set of parameters with a gradient is taken at the first :meth:`all_reduce`, and must stay the same after:
    a parameter whose gradient appears or disappears later is refused (optimum-habana's ``all_reduce_gradients``
    skips such a gradient without a word).

    With ``use_hpu_graphs=True`` the first :meth:`all_reduce` captures the packing (each gradient divided by the world
    size, cast to ``dtype`` and copied into the buffer) and the unpacking (the sums copied back into the gradients)
    as two HPU graphs, as optimum-habana's ``all_reduce_gradients(use_hpu_graphs=True)`` does; later calls replay
    them, with the all-reduce of the buffer (not captured) between them. A replay reads and writes the memory it
    captured, so the gradients must stay the tensors of the first call: :meth:`prepare_backward`, called before each
    backward pass, gives a parameter whose gradient was set to None (``zero_grad(set_to_none=True)``, torch's and
    Lightning's default) its captured tensor back, zeroed, so that the backward pass accumulates into it. A gradient
    that is another tensor anyway at :meth:`all_reduce` is copied into the captured one first (counted in
    :attr:`gradient_copies`, warned once), never left unread.

    Args:
        module: The module whose gradients are reduced.
        dtype: The buffer's dtype: ``torch.float32`` (the sums DDP computes) or ``torch.bfloat16`` (half the
            traffic, optimum-habana's default; gradients are rounded to bfloat16 before they are summed).
        use_hpu_graphs: True: capture packing and unpacking as HPU graphs at the first call and replay them after
            (optimum-habana's default); they need the SDK's lazy mode (``PT_HPU_LAZY_MODE=1``) and gradients on the
            HPU. False: both run as ordinary operations at every call. None (default): graphs where the SDK runs in
            lazy mode, ordinary operations in eager mode.

    Raises:
        ConfigurationError: For a ``dtype`` other than float32 or bfloat16, or a ``use_hpu_graphs`` that is not a
            bool; at the first :meth:`all_reduce` with ``use_hpu_graphs=True``, when the SDK runs in eager mode or a
            gradient is not on the HPU.

    Example:
        >>> import torch
        >>> fusion = GradientFusion(torch.nn.Linear(2, 2), dtype=torch.float32, use_hpu_graphs=False)
        >>> fusion.reductions, fusion.graph_captures, fusion.graph_replays
        (0, 0, 0)
    """

    def __init__(
        self, module: torch.nn.Module, dtype: torch.dtype = torch.float32, use_hpu_graphs: bool | None = None
    ) -> None:
        if dtype not in BUFFER_DTYPES:
            raise ConfigurationError(
                f"buffer_dtype={dtype!r} is not accepted. Accepted: torch.float32 (sums as DDP computes them) or "
                "torch.bfloat16 (half the traffic, as optimum-habana's fast_ddp)."
            )
        if use_hpu_graphs is not None and not isinstance(use_hpu_graphs, bool):
            raise ConfigurationError(
                f"GradientFusion(use_hpu_graphs={use_hpu_graphs!r}) is not accepted. Accepted: True (pack and unpack "
                "captured as HPU graphs, lazy mode), False (run as ordinary operations) or None (graphs in lazy mode "
                "only)."
            )
        if use_hpu_graphs is None:
            use_hpu_graphs = bool(sdk.core_module().is_lazy())
        self.module = module
        self.dtype = dtype
        self.use_hpu_graphs = use_hpu_graphs
        #: How many times the gradients were averaged.
        self.reductions = 0
        #: HPU graphs captured: 2 (pack and unpack) once graphs are in use, 0 without.
        self.graph_captures = 0
        #: HPU graph replays: 2 per reduction after the first (whose capture ran the work).
        self.graph_replays = 0
        #: Gradients that were other tensors than the captured ones at a reduction, and were copied into them.
        self.gradient_copies = 0
        self._names: dict[int, str] = {id(p): n for n, p in module.named_parameters()}
        self._entries: list[tuple[torch.nn.Parameter, Tensor]] | None = None
        self._buffer: Tensor | None = None
        # Graph mode: the gradient tensors the graphs captured, their addresses, the graphs, the scale baked in.
        self._grads: list[Tensor] | None = None
        self._addresses: list[int] = []
        self._graphs: tuple[Any, Any] | None = None
        self._scale = 0.0
        # Entries given their captured gradient back by prepare_backward: index -> version counter after zeroing.
        self._attached: dict[int, int] = {}

    @property
    def graphs_captured(self) -> bool:
        """Whether packing and unpacking run as captured HPU graphs (from the first reduction on)."""
        return self._graphs is not None

    def _build(self) -> None:
        grads = [(p, p.grad) for p in self.module.parameters() if p.grad is not None]
        total = 0
        for _, grad in grads:
            total += grad.numel()
        self._entries = []
        if total == 0:
            return
        if self.use_hpu_graphs:
            self._check_graphs_can_engage([grad for _, grad in grads])
        self._buffer = torch.zeros(total, dtype=self.dtype, device=grads[0][1].device)
        offset = 0
        for p, grad in grads:
            self._entries.append((p, self._buffer[offset : offset + grad.numel()].view(grad.shape)))
            offset += grad.numel()

    def _check_graphs_can_engage(self, grads: list[Tensor]) -> None:
        elsewhere = sorted({str(g.device) for g in grads if g.device.type != sdk.DEVICE_TYPE})
        if elsewhere:
            raise ConfigurationError(
                f"GradientFusion(use_hpu_graphs=True): gradients on {', '.join(elsewhere)}, and HPU graphs capture HPU "
                "work only. Accepted: a module on the HPU, or use_hpu_graphs=False."
            )
        if not sdk.core_module().is_lazy():
            raise ConfigurationError(
                "GradientFusion(use_hpu_graphs=True): the SDK runs in eager mode (PT_HPU_LAZY_MODE=0 or unset, the "
                "default since SDK 1.21), where HPU graphs cannot be created; they are captured from lazy-mode graphs. "
                "Set PT_HPU_LAZY_MODE=1 before the process starts, or pass use_hpu_graphs=False."
            )

    def _check_same_gradients(self) -> None:
        assert self._entries is not None
        reduced = {id(p) for p, _ in self._entries}
        for name, p in self.module.named_parameters():
            if (p.grad is not None) != (id(p) in reduced):
                now = "has a gradient now but had none" if p.grad is not None else "has no gradient now but had one"
                raise RuntimeError(_changed_gradients(name, now))

    def prepare_backward(self) -> None:
        """Before a backward pass: give each parameter whose gradient is None its captured gradient back, zeroed.

        Without graphs, or before the first reduction, nothing is done. The backward pass then accumulates into the
        captured memory, as after ``zero_grad(set_to_none=False)``, which optimum-habana's trainer calls under
        fast_ddp for this reason. A parameter given its gradient back that the backward pass then leaves untouched is
        refused at :meth:`all_reduce`, as a gradient that disappears is.
        """
        if self._grads is None:
            return
        assert self._entries is not None
        missing = [i for i, (p, _) in enumerate(self._entries) if p.grad is None]
        if not missing:
            return
        torch._foreach_zero_([self._grads[i] for i in missing])
        for i in missing:
            grad = self._grads[i]
            self._entries[i][0].grad = grad
            self._attached[i] = grad._version

    def release_unwritten(self) -> None:
        """After a backward pass that wrote none of the module's gradients: undo :meth:`prepare_backward`.

        The gradients it gave back (zeroed) become None again, as the caller left them, so that an optimizer that
        skips parameters without a gradient still skips them. Used by the Fabric strategy, where a backward pass may
        reach only some of the modules set up.
        """
        assert self._entries is not None or not self._attached
        for i, version in self._attached.items():
            assert self._entries is not None and self._grads is not None
            param, grad = self._entries[i][0], self._grads[i]
            if param.grad is grad and grad._version == version:
                param.grad = None
        self._attached.clear()

    def _use_captured_gradients(self) -> None:
        # A replay reads the gradients' memory of the capture: check every gradient is still that memory.
        assert self._entries is not None and self._grads is not None
        for i, (p, _) in enumerate(self._entries):
            grad = p.grad
            assert grad is not None  # _check_same_gradients ran
            captured = self._grads[i]
            name = self._names[id(p)]
            if grad.data_ptr() == self._addresses[i]:
                # Given back zeroed by prepare_backward and not written since: the backward pass produced none.
                if self._attached.get(i) == captured._version:
                    raise RuntimeError(_changed_gradients(name, "got no gradient in this weight update but had one"))
                continue
            if captured.data_ptr() != self._addresses[i]:
                raise RuntimeError(
                    f"fast_ddp: the storage of the gradient of parameter {name!r} was replaced (`.data = ...`) after "
                    "the HPU graphs captured it; the graphs read and write the memory they captured. Replace a "
                    "gradient by assigning `param.grad`, or use use_hpu_graphs=False."
                )
            if (grad.shape, grad.dtype, grad.device) != (captured.shape, captured.dtype, captured.device):
                raise RuntimeError(
                    f"fast_ddp: the gradient of parameter {name!r} is now {tuple(grad.shape)} {grad.dtype} on "
                    f"{grad.device}, and the HPU graphs captured {tuple(captured.shape)} {captured.dtype} on "
                    f"{captured.device}. The gradients must keep their shape, dtype and device."
                )
            if self.gradient_copies == 0:
                warnings.warn(
                    f"fast_ddp: the gradient of parameter {name!r} is a new tensor, not the one the HPU graphs "
                    "captured (set to None by zero_grad() and then computed by a backward pass that did not call "
                    "prepare_backward() first, or replaced). Such gradients are copied into the captured ones before "
                    "the replay, one copy each. Call GradientFusion.prepare_backward() before each backward pass (the "
                    "strategy does), or zero_grad(set_to_none=False), to avoid the copies.",
                    UserWarning,
                    stacklevel=3,
                )
            captured.copy_(grad)
            p.grad = captured
            self.gradient_copies += 1
        self._attached.clear()

    def _pack(self) -> None:
        assert self._entries is not None
        for p, view in self._entries:
            # Divided before the sum, as DDP's reducer does: the result is the mean, in the buffer's precision.
            view.copy_(_grad_of(p).to(self.dtype) * self._scale)

    def _unpack(self) -> None:
        assert self._entries is not None
        for p, view in self._entries:
            _grad_of(p).copy_(view)

    def _capture(self, work: Callable[[], None]) -> Any:
        hpu = sdk.hpu_module()
        graph = hpu.HPUGraph()
        # On a stream of its own, as optimum-habana captures (the bridge ends a capture on the stream it began on).
        with hpu.stream(hpu.Stream()):
            graph.capture_begin()
            try:
                work()
            finally:
                graph.capture_end()
        self.graph_captures += 1
        return graph

    def all_reduce(self, group: Any = None) -> None:
        """Average the gradients over ``group`` (the whole world by default), in place.

        Raises:
            RuntimeError: When the parameters with a gradient differ from those of the first call; with graphs, when
                a gradient changed shape, dtype or device, or the group's size changed.
            ConfigurationError: At the first call with graphs, when they cannot be used (see the class).
        """
        first = self._entries is None
        if first:
            self._build()
        else:
            self._check_same_gradients()
        assert self._entries is not None
        if not self._entries:
            return
        group = torch.distributed.group.WORLD if group is None else group
        scale = 1.0 / torch.distributed.get_world_size(group)
        assert self._buffer is not None
        if not self.use_hpu_graphs:
            self._scale = scale
            self._pack()
            torch.distributed.all_reduce(self._buffer, group=group)
            self._unpack()
        elif first:
            self._scale = scale
            self._grads = [_grad_of(p) for p, _ in self._entries]
            self._addresses = [g.data_ptr() for g in self._grads]
            # Each capture runs its work too (the bridge's capture_end marks a step, which launches it), so the
            # first call does not replay what it captured; optimum-habana's replay right after is a repeat.
            pack = self._capture(self._pack)
            torch.distributed.all_reduce(self._buffer, group=group)
            self._graphs = (pack, self._capture(self._unpack))
        else:
            assert self._graphs is not None
            if scale != self._scale:
                raise RuntimeError(
                    f"fast_ddp: the group now has {round(1 / scale)} ranks and the HPU graphs divide by "
                    f"{round(1 / self._scale)}, the size at their capture. Reduce over the group of the first call."
                )
            self._use_captured_gradients()
            pack, unpack = self._graphs
            pack.replay()
            torch.distributed.all_reduce(self._buffer, group=group)
            unpack.replay()
            self.graph_replays += 2
        self.reductions += 1


def _grad_of(param: torch.nn.Parameter) -> Tensor:
    grad = param.grad
    assert grad is not None  # the parameters of the buffer had a gradient at the first call
    return grad


def _changed_gradients(name: str, now: str) -> str:
    return (
        f"fast_ddp: parameter {name!r} {now} at the first step. fast_ddp reduces the gradients of the "
        "parameters that had one at the first step, in one fixed buffer, so that set must not change "
        "(a frozen or unused parameter must stay so). Use HPUParallelStrategy(find_unused_parameters=True) "
        "for a model whose used parameters change between steps."
    )


def check_fast_ddp_arguments(
    owner: str, extra: dict[str, Any], accepted: str, buffer_dtype: Any, use_hpu_graphs: Any
) -> None:
    """Refuse what a fast_ddp strategy's constructor cannot honour, naming the argument, its value and what is accepted.

    Args:
        owner: The strategy's class name, for the messages.
        extra: The keyword arguments the constructor does not take (DDP's own, which fast_ddp does not build).
        accepted: The constructor's arguments, listed in the message about ``extra``.
        buffer_dtype: The fused buffer's dtype.
        use_hpu_graphs: True, False or None.

    Raises:
        ConfigurationError: For any ``extra``, a ``buffer_dtype`` HCCL does not reduce natively, or a
            ``use_hpu_graphs`` that is not a bool or None.
    """
    if extra:
        raise ConfigurationError(
            f"{owner}: {', '.join(sorted(extra))} not accepted: these are arguments of DistributedDataParallel, which "
            f"fast_ddp does not build. Accepted: {accepted}. For DDP's options use HPUParallelStrategy."
        )
    if buffer_dtype not in BUFFER_DTYPES:
        raise ConfigurationError(
            f"{owner}(buffer_dtype={buffer_dtype!r}) is not accepted. Accepted: torch.float32 or torch.bfloat16 (HCCL "
            "reduces both natively)."
        )
    if use_hpu_graphs is not None and not isinstance(use_hpu_graphs, bool):
        raise ConfigurationError(
            f"{owner}(use_hpu_graphs={use_hpu_graphs!r}) is not accepted. Accepted: True (pack and unpack captured as "
            "HPU graphs, lazy mode), False (run as ordinary operations) or None (graphs in lazy mode only)."
        )


def graphs_for_mode(owner: str, use_hpu_graphs: bool | None) -> bool:
    """Whether the packing runs as HPU graphs in the SDK's current mode: None means lazy mode's graphs.

    Raises:
        ConfigurationError: For ``use_hpu_graphs=True`` in eager mode, where HPU graphs cannot be created. Called at
            set-up, before any collective and any step.
    """
    lazy = bool(sdk.core_module().is_lazy())
    if use_hpu_graphs and not lazy:
        raise ConfigurationError(
            f"{owner}(use_hpu_graphs=True): the SDK runs in eager mode (PT_HPU_LAZY_MODE=0 or unset, the default "
            "since SDK 1.21), and HPU graphs are created in lazy mode only. Set PT_HPU_LAZY_MODE=1 before the process "
            "starts, or leave use_hpu_graphs unset (graphs in lazy mode only) or False."
        )
    return lazy if use_hpu_graphs is None else use_hpu_graphs


def broadcast_from_rank_zero(module: torch.nn.Module) -> None:
    """Make every rank's parameters and buffers rank 0's, as DDP does when it wraps a module."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            torch.distributed.broadcast(tensor.data, src=0)


def report_graphs(owner: str, fusion: GradientFusion) -> None:
    """After the first reduction with graphs asked for: say they were captured, or why not (nothing silently not done).

    Raises:
        RuntimeError: When gradients were reduced but the two graphs were not captured.
    """
    assert fusion._entries is not None
    if not fusion._entries:
        rank_zero_warn(
            f"{owner}(use_hpu_graphs=True): no parameter had a gradient at the first weight update, so nothing is "
            "reduced and no HPU graph was captured.",
            category=UserWarning,
        )
        return
    if not fusion.graphs_captured or fusion.graph_captures != 2:
        raise RuntimeError(
            f"{owner}(use_hpu_graphs=True): after the first weight update {fusion.graph_captures} HPU graphs were "
            "captured, and packing and unpacking need 2. This is a bug: please report it."
        )
    numel = sum(view.numel() for _, view in fusion._entries)
    rank_zero_info(
        f"fast_ddp: packing and unpacking {len(fusion._entries)} gradients ({numel} elements, {fusion.dtype}) "
        "captured as 2 HPU graphs, replayed at every later weight update."
    )
