"""Turning a user's ``DataLoader`` into a ``poptorch.DataLoader`` whose batches feed one host call each."""

from __future__ import annotations

from collections.abc import Sized
from types import ModuleType
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, IterableDataset

from lightning_accel.core.errors import ConfigurationError

__all__ = ["to_poptorch_loader"]

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


def to_poptorch_loader(dataloader: object, options: Any, poptorch: ModuleType, name: str) -> object:
    """A ``poptorch.DataLoader`` over the same data, sampler and collation as ``dataloader``.

    A ``poptorch.DataLoader`` the user built is kept. A training loader drops an incomplete last batch (the training
    model is compiled for one batch shape); evaluation loaders keep it.

    Raises:
        ConfigurationError: For a training set smaller than one host batch.
    """
    if isinstance(dataloader, poptorch.DataLoader):
        return dataloader
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
            # A batch sampler that wraps a sampler (Lightning's predict wrapper copies these attributes) is unwrapped.
            inner_size = getattr(batch_sampler, "batch_size", None)
            inner_sampler = getattr(batch_sampler, "sampler", None)
            if isinstance(inner_size, int) and inner_sampler is not None:
                batch_size, sampler = inner_size, inner_sampler
            else:
                # batch_size stays at poptorch's default: any other value (None included) is refused with a sampler.
                return poptorch.DataLoader(options, dataset, batch_sampler=batch_sampler, **kwargs)
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
