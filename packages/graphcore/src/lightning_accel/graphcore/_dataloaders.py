"""Turning a user's ``DataLoader`` into a ``poptorch.DataLoader`` whose batches feed one host call each."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from types import ModuleType
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from lightning_accel.core.errors import ConfigurationError

__all__ = ["CombinedBatchLoader", "OwnedAsyncBatches", "to_poptorch_loader"]

_COPIED = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "persistent_workers",
)


def _factor(options: Any) -> int:
    return int(
        options.device_iterations
        * (options.replication_factor // options.input_group_size)
        * options.Training.gradient_accumulation
    )


class CombinedBatchLoader(DataLoader):
    """A loader over a user's batch sampler whose batches are ``factor`` of the sampler's batches, concatenated.

    ``poptorch.DataLoader(batch_sampler=...)`` concatenates ``factor`` collated batches per host call, but its
    ``len()`` is torch's, the sampler's uncombined count (poptorch 3.4 ``python/__init__.py:468-480, 517-523``):
    Lightning would expect ``factor`` times too many batches (progress, ``val_check_interval``,
    ``estimated_stepping_batches``). This loader combines the same way and reports the combined count.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset
        >>> data = TensorDataset(torch.arange(10.0))
        >>> loader = CombinedBatchLoader(data, BatchSampler(SequentialSampler(data), 2, False), 2, drop_last=True)
        >>> len(loader), [batch[0].tolist() for batch in loader]
        (2, [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    """

    def __init__(self, dataset: Any, batch_sampler: Any, factor: int, drop_last: bool, **kwargs: Any) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self.factor = factor
        self.combined_drop_last = drop_last

    def __len__(self) -> int:
        full, rest = divmod(super().__len__(), self.factor)
        return full + (1 if rest and not self.combined_drop_last else 0)

    def __iter__(self) -> Any:
        group: list[Any] = []
        for batch in super().__iter__():
            group.append(batch)
            if len(group) == self.factor:
                yield _concatenate(group)
                group = []
        if group and not self.combined_drop_last:
            yield _concatenate(group)


def _concatenate(batches: list[Any]) -> Any:
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches)
    if isinstance(first, Mapping):
        return type(first)({key: _concatenate([batch[key] for batch in batches]) for key in first})  # type: ignore[call-arg]
    if isinstance(first, (list, tuple)):
        items = [_concatenate(list(column)) for column in zip(*batches)]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    return batches[-1]


def _plain_batching(batch_sampler: Any) -> bool:
    """Whether ``batch_sampler`` batches as torch's ``BatchSampler`` does (consecutive ``batch_size`` indices)."""
    # Lightning's _IndexBatchSamplerWrapper (predict) holds the user's batch sampler in _batch_sampler.
    inner = getattr(batch_sampler, "_batch_sampler", batch_sampler)
    kind = type(inner)
    return isinstance(inner, BatchSampler) and kind.__iter__ is BatchSampler.__iter__


def to_poptorch_loader(dataloader: object, options: Any, poptorch: ModuleType, name: str) -> object:
    """A ``poptorch.DataLoader`` over the same data, sampler and collation as ``dataloader``.

    A ``poptorch.DataLoader`` the user built is kept. A training loader drops an incomplete last batch (the training
    model is compiled for one batch shape); evaluation loaders keep it.

    Raises:
        ConfigurationError: For a training set smaller than one host batch.
    """
    if isinstance(dataloader, poptorch.DataLoader):
        return OwnedAsyncBatches(dataloader) if _loads_asynchronously(dataloader) else dataloader
    if not isinstance(dataloader, DataLoader):
        if isinstance(dataloader, Sized) and len(dataloader) == 0:
            return dataloader
        rank_zero_warn(
            f"The {name} is a {type(dataloader).__name__}, not a torch DataLoader: its batches go to the IPUs as they "
            f"are, so each must hold {_factor(options)} x the micro-batch size (device_iterations x replicas x "
            "accumulation). Return a torch.utils.data.DataLoader to have batches combined for you."
        )
        return dataloader
    kwargs: dict[str, Any] = {key: getattr(dataloader, key) for key in _COPIED}
    if dataloader.num_workers > 0:
        kwargs["prefetch_factor"] = dataloader.prefetch_factor
    dataset = dataloader.dataset
    batch_size = dataloader.batch_size
    iterable = isinstance(dataset, IterableDataset)
    if not iterable:
        sampler = dataloader.sampler
        batch_sampler = dataloader.batch_sampler
        if batch_size is None:
            # torch's own BatchSampler is unwrapped to its sampler and batch size (Lightning's predict wrapper copies
            # these attributes); a subclass with its own batching (length bucketing) keeps it.
            inner_size = getattr(batch_sampler, "batch_size", None)
            inner_sampler = getattr(batch_sampler, "sampler", None)
            if isinstance(inner_size, int) and inner_sampler is not None and _plain_batching(batch_sampler):
                batch_size, sampler = inner_size, inner_sampler
            else:
                return CombinedBatchLoader(
                    dataset, batch_sampler, _factor(options), drop_last="train" in name, **kwargs
                )
        kwargs["sampler"] = sampler
    if batch_size is None:
        raise ConfigurationError(f"The {name} has batch_size=None; IPUs need a fixed batch size.")
    combined = batch_size * _factor(options)
    training = "train" in name
    if training and not iterable and isinstance(dataset, Sized) and len(dataset) < combined:
        raise ConfigurationError(
            f"The {name} has {len(dataset)} samples but one IPU host call takes {combined} (batch_size={batch_size} x "
            f"device_iterations={options.device_iterations} x replicas={options.replication_factor} x "
            f"gradient_accumulation={options.Training.gradient_accumulation}). Lower one of them or add data."
        )
    # Training drops an incomplete last batch (the training model is compiled for one shape); evaluation keeps it
    # and the strategy compiles a second model for it.
    return poptorch.DataLoader(options, dataset, batch_size=batch_size, drop_last=training, **kwargs)


def _loads_asynchronously(loader: object) -> bool:
    """Whether a ``poptorch.DataLoader`` hands out batches from an ``AsynchronousDataAccessor`` (Async modes)."""
    # poptorch 3.4 keeps the accessor in ``_accessor`` (python/__init__.py, DataLoader.__init__), None for Sync.
    return getattr(loader, "_accessor", None) is not None


class OwnedAsyncBatches:
    """A user's asynchronous ``poptorch.DataLoader`` whose batches are copied out of poptorch's ring buffer.

    poptorch's ``AsynchronousDataAccessor`` hands out views of a ring of ``buffer_size`` slots and refills a slot as
    soon as the next batch is requested. Lightning requests batch k+1 before it runs step k whenever the loader has no
    length (to know which batch is the last), and a ``training_step(dataloader_iter)`` may do the same, so step k
    would read a later batch's samples. Each batch is therefore copied (its tensors, in lists, tuples, dicts and
    dataclasses) when it is fetched; everything else is the user's loader, reached through this object.
    """

    def __init__(self, loader: Any) -> None:
        object.__setattr__(self, "loader", loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield apply_to_collection(batch, torch.Tensor, torch.Tensor.clone)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets loader attributes (worker_init_fn): they belong to the user's loader.
        setattr(self.loader, name, value)
