"""``poptorch.DataLoader``: a torch ``DataLoader`` whose batches feed one host call each."""

from __future__ import annotations

import collections
import logging
import sys
import traceback
import weakref
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from .enums import DataLoaderMode, SharingStrategy
from .errors import Error
from .options import Options
from .structures import flatten, get_custom_parser, unflatten

__all__ = ["AsynchronousDataAccessor", "DataLoader"]

log = logging.getLogger("poptorch")


def _combined_batches(batches: Iterable[Any], factor: int, drop_last: bool) -> Iterator[Any]:
    """Concatenate ``factor`` consecutive collated batches along dimension 0 (``_utils.py:151-175``, poptorch 3.4)."""
    group: list[Any] = []
    for batch in batches:
        group.append(batch)
        if len(group) == factor:
            yield _concatenate(group)
            group = []
    if group and not drop_last:
        yield _concatenate(group)


def _concatenate(batches: list[Any]) -> Any:
    leaves = [flatten(batch)[0] for batch in batches]
    combined = [torch.cat(column) if isinstance(column[0], torch.Tensor) else column[-1] for column in zip(*leaves)]
    return unflatten(combined, flatten(batches[-1])[1])


def _rebatched(batches: Iterable[Any], size: int, drop_last: bool) -> Iterator[Any]:
    """The rows of ``batches`` handed out again in batches of ``size`` (poptorch 3.4's worker, ``_dataloader.py``).

    poptorch's AsyncRebatched worker copies the rows of each batch its loader yields into the next ring-buffer slot
    until the slot holds ``size`` rows, and keeps the rows that did not fit for the next slot (:531-556); at the end
    of the data a slot that is not full is handed out unless ``drop_last`` (:496-504). So the remainders of an
    IterableDataset's workers make batches together, where torch hands each worker's remainder out (or drops it).
    """
    carry: list[Any] | None = None
    spec: Any = None
    for batch in batches:
        leaves, spec = flatten(batch)
        if carry is None:
            carry = leaves
        else:
            carry = [torch.cat([old, new]) if isinstance(new, torch.Tensor) else new for old, new in zip(carry, leaves)]
        while _rows(carry) >= size:
            yield unflatten([_head(leaf, size) for leaf in carry], spec)
            carry = [leaf[size:] if isinstance(leaf, torch.Tensor) else leaf for leaf in carry]
    if carry is not None and _rows(carry) > 0 and not drop_last:
        yield unflatten(carry, spec)


def _rows(leaves: list[Any]) -> int:
    return next((leaf.shape[0] for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.dim() > 0), 0)


def _head(leaf: Any, rows: int) -> Any:
    return leaf[:rows] if isinstance(leaf, torch.Tensor) else leaf


class DataLoader(torch.utils.data.DataLoader):
    """``poptorch.DataLoader``: each batch holds ``batch_size x device_iterations x replicas x accumulation`` samples.

    The options are frozen. ``drop_last`` defaults to ``True`` because a smaller last batch would not match the
    compiled model. With ``mode=DataLoaderMode.Async`` the batches come through an
    :class:`AsynchronousDataAccessor`, with its rules.

    Example:
        >>> opts = Options().deviceIterations(4)
        >>> loader = DataLoader(opts, torch.utils.data.TensorDataset(torch.arange(32.0)), batch_size=2)
        >>> loader.combinedBatchSize, len(loader)
        (8, 4)
    """

    def __init__(
        self,
        options: Options,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        num_workers: int = 0,
        drop_last: bool = True,
        persistent_workers: bool | None = None,
        auto_distributed_partitioning: bool = True,
        mode: DataLoaderMode = DataLoaderMode.Sync,
        async_options: dict[str, Any] | None = None,
        rebatched_worker_size: int | None = None,
        batch_sampler: Iterable[list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        self._accessor: AsynchronousDataAccessor | None = None
        # (size, drop_last) of the batches the accessor makes from the loader's rows (AsyncRebatched), else None.
        self._rebatch: tuple[int, bool] | None = None
        self._build(
            options,
            dataset,
            batch_size,
            shuffle,
            num_workers,
            drop_last,
            persistent_workers,
            batch_sampler,
            kwargs,
            (mode, rebatched_worker_size),
        )
        # Async and AsyncRebatched load through an AsynchronousDataAccessor (__init__.py:434-466).
        if mode in (DataLoaderMode.Async, DataLoaderMode.AsyncRebatched):
            async_options = dict(async_options or {})
            assert "rebatched_size" not in async_options, (
                "You cannot use DataLoaderMode.AsyncRebatched and manually specify the rebatched_size in async_options"
            )
            self._accessor = AsynchronousDataAccessor(self, **async_options)
            self._accessor._serve(self)

    def _build(
        self,
        options: Options,
        dataset: Dataset[Any],
        batch_size: int | None,
        shuffle: bool | None,
        num_workers: int,
        drop_last: bool,
        persistent_workers: bool | None,
        batch_sampler: Iterable[list[int]] | None,
        kwargs: dict[str, Any],
        asynchronous: tuple[DataLoaderMode, int | None],
    ) -> None:
        """The synchronous loader; ``__init__`` adds the asynchronous accessor after it, whichever way this returns.

        ``asynchronous``: the mode and ``rebatched_worker_size``, which decide whether the accessor rebatches.
        """
        # An assert in poptorch 3.4 (__init__.py:311).
        assert isinstance(options, Options), f"poptorch.DataLoader takes a poptorch.Options first, got {options!r}"
        # poptorch checks neither mode nor persistent_workers: a mode that is not Async or AsyncRebatched loads
        # synchronously, and torch's DataLoader refuses persistent workers without workers
        # (__init__.py:312-314, 449-457).
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        options._freeze()
        factor = (
            options.device_iterations
            * (options.replication_factor // options.input_group_size)
            * options.Training.gradient_accumulation
        )
        self._options = options
        self._factor = factor
        self._batches_to_combine = 1
        self._combined_drop_last = drop_last
        if batch_sampler is not None:
            # poptorch 3.4 __init__.py:293-297: batch_size must stay at its default (1), None included.
            if batch_size != 1 or shuffle:
                raise Error("`batch_sampler` option is mutually exclusive with batch_size, shuffle.")
            inner = getattr(batch_sampler, "batch_size", None)
            self._combined: int | None = inner * factor if isinstance(inner, int) else None
            # torch iterates the user's sampler and knows its length; __iter__ combines its batches, so len() is
            # the uncombined count, as in poptorch (__init__.py:468-480, 517-523).
            self._batches_to_combine = factor
            self._combined_drop_last = drop_last
            if self._rebatches(asynchronous[0], drop_last):
                assert self._combined is not None
                # poptorch's drop_last is None with a batch sampler: an incomplete last batch is kept.
                self._rebatch = (self._combined, False)
            super().__init__(
                dataset,
                batch_sampler=batch_sampler,
                num_workers=num_workers,
                persistent_workers=persistent_workers,
                **kwargs,
            )
            return
        if batch_size is None:
            # Unbatched, as in poptorch (__init__.py:319-321): each sample is given to the model as it is.
            self._combined = None
            super().__init__(
                dataset,
                batch_size=None,
                shuffle=bool(shuffle),
                num_workers=num_workers,
                persistent_workers=persistent_workers,
                **kwargs,
            )
            return
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"poptorch.DataLoader(batch_size={batch_size!r}): pass a positive int or None.")
        self._combined = batch_size * factor
        loader_batch, loader_drop_last = self._combined, drop_last
        if self._rebatches(asynchronous[0], drop_last):
            # torch's loader yields batches of rebatched_worker_size and keeps its incomplete ones; the accessor
            # makes the combined batches (__init__.py:417-447).
            self._rebatch = (self._combined, drop_last)
            worker_size = asynchronous[1]
            if worker_size is not None:
                assert worker_size <= self._combined, (
                    f"The rebatched_worker_size ({worker_size}) must be <= to the combined batch size "
                    f"({self._combined})"
                )
                loader_batch = worker_size
            loader_drop_last = False
        if not drop_last and not isinstance(dataset, IterableDataset) and isinstance(dataset, Sized):
            remainder = len(dataset) % self._combined
            if remainder:
                log.warning(
                    "The number of elements in the dataset (%d) is not divisible by the number of elements processed "
                    "per step (%d) and drop_last=False. The last tensor will have a batch size of %d. To avoid having "
                    "to handle this special case switch to drop_last=True",
                    len(dataset),
                    self._combined,
                    remainder,
                )
        super().__init__(
            dataset,
            batch_size=loader_batch,
            shuffle=bool(shuffle),
            num_workers=num_workers,
            drop_last=loader_drop_last,
            persistent_workers=persistent_workers,
            **kwargs,
        )

    def _rebatches(self, mode: DataLoaderMode, drop_last: bool) -> bool:
        """AsyncRebatched, or Async with ``drop_last=False`` and more than one sample per step (__init__.py:425-431)."""
        if self._combined is None:
            return False
        return mode == DataLoaderMode.AsyncRebatched or (
            mode == DataLoaderMode.Async and not drop_last and self._combined > 1
        )

    def __len__(self) -> int:
        if self._rebatch is None:
            return super().__len__()
        # As poptorch 3.4 (__init__.py:468-480): the samples over the rebatched size, rounded up unless drop_last.
        size, drop_last = self._rebatch
        samples = len(self.dataset)  # type: ignore[arg-type]
        return samples // size + (0 if drop_last or samples % size == 0 else 1)

    @property
    def _combined_batch_size(self) -> int | None:
        return self._combined

    @property
    def combinedBatchSize(self) -> int | None:
        """Samples one host call takes: ``batch_size x device_iterations x replicas x gradient_accumulation``."""
        return self._combined

    @property
    def options(self) -> Options:
        """The (frozen) options the loader was built with."""
        return self._options

    def terminate(self) -> None:
        """Stop an asynchronous loader's worker (the emulator's loads in the calling thread: nothing to stop)."""
        if self._accessor is not None:
            self._accessor.terminate()

    def __iter__(self) -> Any:
        if self._accessor is not None:
            return iter(self._accessor)
        return self._sync_iter()

    def _sync_iter(self) -> Any:
        if self._batches_to_combine == 1:
            return super().__iter__()
        return _combined_batches(super().__iter__(), self._batches_to_combine, self._combined_drop_last)


class AsynchronousDataAccessor:
    """poptorch's background loader, with its ring buffer: batches are views of ``buffer_size`` reused slots.

    As poptorch 3.4 (``python/__init__.py:526-657``, ``python/_dataloader.py``): the worker reads the first element
    when the accessor is made and accepts only a tensor, a dict of tensors, a type with a custom argument parser, or a
    flat list or tuple of tensors (anything else: "AsynchronousDataAccessor worker thread failed to start"); a tuple
    comes back as a list. Each element is copied into the next slot of a ring of ``buffer_size`` and handed out as
    views of that slot; once the next element is requested, the worker refills the released slot, so an element kept
    past ``next()`` is overwritten by the one ``buffer_size`` later. The emulator loads in the calling thread, one
    ``buffer_size`` ahead, as a worker that always keeps up; the elements are the wrapped loader's.

    Example:
        >>> data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4.0)), batch_size=1)
        >>> accessor = AsynchronousDataAccessor(data, buffer_size=2)
        >>> [batch[0].item() for batch in accessor]
        [0.0, 1.0, 2.0, 3.0]
    """

    def __init__(
        self,
        dataset: Iterable[Any],
        buffer_size: int = 3,
        miss_sleep_time_in_ms: float = 0.1,
        load_indefinitely: bool = True,
        early_preload: bool = False,
        sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
        rebatched_size: int | None = None,
    ) -> None:
        if isinstance(dataset, DataLoader) and dataset._accessor is not None:
            raise Error(
                "The DataLoader already uses an AsynchronousDataAccessor internally. Either use the existing one or "
                "set mode='poptorch.DataLoaderMode.Sync' in the DataLoader."
            )
        if rebatched_size is not None:
            assert rebatched_size > 1, "rebatched_size must be None or greater than 1"
        self._dataset: Iterable[Any] | None = dataset
        # Set by _serve when the accessor is the one a DataLoader made for itself.
        self._owner: weakref.ReferenceType[DataLoader] | None = None
        self.rebatched_size = rebatched_size
        self._buffer_size = buffer_size
        self._slots: list[list[torch.Tensor]] = []
        self._kind: tuple[str, Any] = ("list", None)
        self._pending: collections.deque[list[torch.Tensor]] = collections.deque()
        self._source: Iterator[Any] | None = None
        self._locked: bool | None = None
        self._was_used = False
        self._next_write = 0
        # The worker reads the first element as it starts (_dataloader.py:296-380).
        failure = None
        try:
            # In its own process: the host's random generator does not move (a shuffled loader's order stays).
            with torch.random.fork_rng(devices=[]):
                first = next(self._elements(), None)
            if first is None:
                raise Error("The Dataset is empty")
            self._kind, tensors = self._split(first)
        except Exception as err:
            # poptorch's worker process prints its traceback as it dies; the host sees only that it ended.
            failure = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            # The error's traceback holds the frames of the loader's iterator, and with it the torch workers; torch
            # re-raises a worker's error from a frame that holds the error, a cycle that only the garbage collector
            # frees, and by then torch's shutdown waits 5 s for each worker (160 s for 32). Cleared, the frames let
            # the iterator go by its reference count, as it does once poptorch's worker process has ended.
            traceback.clear_frames(err.__traceback__)
        if failure is not None:
            # On the standard error, as the dying worker process prints it (multiprocessing's BaseProcess._bootstrap),
            # not through a logger: poptorch's test_subprocess_broken_dataset finds the error's text in the output.
            sys.stderr.write(failure)
            sys.stderr.flush()
            # Raised outside the except block and without the cause, as poptorch does (_dataloader.py:251-256).
            raise Error("AsynchronousDataAccessor worker thread failed to start (Check above for details)")
        self._slots = [[torch.empty_like(t) for t in tensors] for _ in range(buffer_size)]

    def _serve(self, loader: DataLoader) -> None:
        """Become ``loader``'s own accessor: it holds this accessor, and this accessor holds it only weakly.

        A strong reference both ways would make a cycle that only the garbage collector frees, and by then the
        multiprocessing queues of the loader's torch workers are closed (the collector runs their finalizers first),
        so torch's shutdown waits its 5 s timeout for each worker before it kills it: 35 s for a loader of 7 workers.
        Freed by its reference count, the loader stops its workers at once, as a torch DataLoader does.
        """
        self._dataset = None
        self._owner = weakref.ref(loader)

    def _data(self) -> Iterable[Any]:
        """What the accessor loads from: the dataset or loader it was given, or the DataLoader it serves."""
        if self._owner is None:
            assert self._dataset is not None
            return self._dataset
        loader = self._owner()
        if loader is None:
            # Only an iterator kept past its DataLoader gets here, when it is iterated again.
            raise Error("The poptorch.DataLoader this AsynchronousDataAccessor loads for has been deleted.")
        return loader

    def _elements(self) -> Iterator[Any]:
        dataset = self._data()
        if isinstance(dataset, DataLoader):
            # Its own accessor's, or one made for a Sync loader (a loader with an accessor of its own refuses another).
            if dataset._rebatch is not None:
                return _rebatched(dataset._sync_iter(), *dataset._rebatch)
            return dataset._sync_iter()
        return iter(dataset)

    @staticmethod
    def _split(element: Any) -> tuple[tuple[str, Any], list[torch.Tensor]]:
        """How the element is rebuilt on the host, and its tensors (a flat container, ``_dataloader.py:308-366``)."""
        parser = get_custom_parser(element)
        if isinstance(element, torch.Tensor):
            kind: tuple[str, Any] = ("tensor", None)
            tensors: list[Any] = [element]
        elif isinstance(element, dict):
            kind, tensors = ("dict", list(element)), list(element.values())
        elif parser is not None:
            kind, tensors = ("custom", element), list(parser.yieldTensors(element))
        else:
            kind, tensors = ("list", None), list(element)
        for index, tensor in enumerate(tensors):
            assert isinstance(tensor, torch.Tensor), (
                f"Tensor at index {index} is not a torch tensor ({type(tensor)}). AsynchronousDataAccessor expects "
                "data to be organised as a flat 1D container of tensors."
            )
        return kind, tensors

    def _fill(self) -> None:
        """The worker loads elements into the free slots, in ring order; the slot the host holds is not free."""
        assert self._source is not None
        while len(self._pending) + (self._locked is not None) < self._buffer_size:
            element = next(self._source, None)
            if element is None:
                return
            _, tensors = self._split(element)
            index = self._next_write % self._buffer_size
            self._next_write += 1
            views = []
            for buffer, tensor in zip(self._slots[index], tensors):
                rows = tensor.shape[0] if tensor.dim() > 0 else None
                view = buffer if rows is None or rows == buffer.shape[0] else buffer.narrow(0, 0, rows)
                view.copy_(tensor)
                views.append(view)
            self._pending.append(views)

    def __iter__(self) -> AsynchronousDataAccessor:
        if self._source is not None and not self._was_used and self._pending:
            # The epoch started last has handed out nothing yet: it goes on (AsynchronousWorker.resetIterator,
            # _dataloader.py:44-46), so `for batch in iter(loader)` starts one epoch, not two. (An epoch that came
            # out empty starts again.)
            return self
        self._was_used = False
        self._source = self._elements()
        self._pending.clear()
        self._locked = None
        self._next_write = 0
        self._fill()
        return self

    def __next__(self) -> Any:
        if self._source is None:
            self.__iter__()
        # The element handed out before is released: the worker refills its slot (_dataloader.py:136-139).
        self._locked = None
        self._fill()
        if not self._pending:
            raise StopIteration
        views = self._pending.popleft()
        self._locked = True
        self._was_used = True
        kind, detail = self._kind
        if kind == "tensor":
            return views[0]
        if kind == "dict":
            return dict(zip(detail, views))
        if kind == "custom":
            return reconstruct_custom(detail, views)
        return views

    def __len__(self) -> int:
        dataset = self._data()
        if not isinstance(dataset, Sized):
            raise TypeError("The wrapped loader has no length.")
        return len(dataset)

    def terminate(self) -> None:
        """Stop the background worker (the emulator's loads in the calling thread: nothing to stop)."""


def reconstruct_custom(original: Any, tensors: list[torch.Tensor]) -> Any:
    """``original`` rebuilt by its custom argument parser from ``tensors``."""
    return get_custom_parser(original).reconstruct(original, iter(tensors))
