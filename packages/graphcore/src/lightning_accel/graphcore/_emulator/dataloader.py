"""``poptorch.DataLoader``: a torch ``DataLoader`` whose batches feed one host call each."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from .enums import DataLoaderMode, SharingStrategy
from .errors import Error
from .options import Options
from .structures import flatten, unflatten

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


class DataLoader(torch.utils.data.DataLoader):
    """``poptorch.DataLoader``: each batch holds ``batch_size x device_iterations x replicas x accumulation`` samples.

    The options are frozen. ``drop_last`` defaults to ``True`` because a smaller last batch would not match the
    compiled model. ``mode`` is accepted; the emulator always loads synchronously.

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
        # An assert in poptorch 3.4 (__init__.py:311).
        assert isinstance(options, Options), f"poptorch.DataLoader takes a poptorch.Options first, got {options!r}"
        if not isinstance(mode, DataLoaderMode):
            raise TypeError(f"mode must be a poptorch.DataLoaderMode, got {mode!r}.")
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
            super().__init__(
                dataset,
                batch_sampler=batch_sampler,
                num_workers=num_workers,
                persistent_workers=bool(persistent_workers) and num_workers > 0,
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
                persistent_workers=bool(persistent_workers) and num_workers > 0,
                **kwargs,
            )
            return
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"poptorch.DataLoader(batch_size={batch_size!r}): pass a positive int or None.")
        self._combined = batch_size * factor
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
            batch_size=self._combined,
            shuffle=bool(shuffle),
            num_workers=num_workers,
            drop_last=drop_last,
            persistent_workers=bool(persistent_workers) and num_workers > 0,
            **kwargs,
        )

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
        """Stop an asynchronous loader's worker (the emulator loads synchronously: nothing to stop)."""

    def __iter__(self) -> Any:
        if self._batches_to_combine == 1:
            return super().__iter__()
        return _combined_batches(super().__iter__(), self._batches_to_combine, self._combined_drop_last)


class AsynchronousDataAccessor:
    """poptorch's background loader; the emulator iterates the wrapped loader synchronously (same batches).

    Example:
        >>> accessor = AsynchronousDataAccessor([1, 2])
        >>> list(accessor)
        [1, 2]
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
        self._dataset = dataset

    def __iter__(self) -> Iterator[Any]:
        return iter(self._dataset)

    def __len__(self) -> int:
        if not isinstance(self._dataset, Sized):
            raise TypeError("The wrapped loader has no length.")
        return len(self._dataset)

    def terminate(self) -> None:
        """Stop the background worker (nothing to stop in the emulator)."""
