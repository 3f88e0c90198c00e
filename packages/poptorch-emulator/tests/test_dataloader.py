"""``poptorch.DataLoader`` and ``AsynchronousDataAccessor``: what they keep alive, and how a failed start is reported.

A loader left to the garbage collector has its torch workers stopped only after their queues are closed, and torch's
shutdown then waits 5 s for each worker: these tests check that nothing of the emulator's own makes a loader wait for
the collector (the collector is switched off while they run, so only reference counts free anything).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from lightning_accel.poptorch_emulator import AsynchronousDataAccessor, DataLoader, DataLoaderMode, Error, Options


@pytest.fixture(autouse=True)
def _no_collector() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _numbers(rows: int = 8) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(float(rows)))


class Broken(torch.utils.data.Dataset[Any]):
    """Fails on every sample, from a frame that holds its error (as torch re-raises a worker's error)."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> Any:
        error = self.error("Broken dataset")
        raise error


@pytest.mark.parametrize("mode", [DataLoaderMode.Async, DataLoaderMode.AsyncRebatched], ids=["Async", "AsyncRebatched"])
def test_an_async_loader_is_freed_by_its_reference_count(mode: DataLoaderMode) -> None:
    loader = DataLoader(Options(), _numbers(), batch_size=2, mode=mode)
    for _ in loader:
        break  # an epoch left half-way, as poptorch's test_interrupt_async_loader does
    gone = weakref.ref(loader)
    del loader
    assert gone() is None, "the loader and its accessor hold each other: only the garbage collector frees them"


def test_an_iterator_outlives_its_loader_for_the_epoch_it_started() -> None:
    batches = iter(DataLoader(Options(), _numbers(), batch_size=2, mode=DataLoaderMode.Async))
    assert [batch[0].tolist() for batch in batches] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    with pytest.raises(
        Error, match=r"The poptorch\.DataLoader this AsynchronousDataAccessor loads for has been deleted"
    ):
        iter(batches)


@pytest.mark.parametrize("error", [AssertionError, ValueError])
def test_a_failed_start_is_poptorchs_error_and_keeps_nothing_alive(
    error: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    # poptorch's worker process dies of any error and prints its traceback on the standard error; the host raises
    # its own error, with no cause (_dataloader.py:251-256).
    loader = DataLoader(Options(), Broken(error), batch_size=1)
    gone = weakref.ref(loader)
    with pytest.raises(Error, match="AsynchronousDataAccessor worker thread failed to start") as raised:
        AsynchronousDataAccessor(loader)
    assert raised.value.__cause__ is None
    printed = capsys.readouterr().err
    assert f"{error.__name__}: Broken dataset" in printed
    assert "Traceback (most recent call last)" in printed
    del loader, raised
    assert gone() is None, "the error's traceback holds the loader until the garbage collector runs"


def test_iter_of_an_epoch_that_handed_out_nothing_goes_on_with_it() -> None:
    # AsynchronousWorker.resetIterator (_dataloader.py:44-46): an epoch not used yet is not started again.
    started = []

    class Counted(torch.utils.data.IterableDataset[torch.Tensor]):
        def __iter__(self) -> Iterator[torch.Tensor]:
            started.append(True)
            return iter(torch.arange(4.0).reshape(4, 1))

    accessor = AsynchronousDataAccessor(Counted())
    assert len(started) == 1  # the first element, read as the worker starts
    assert [row.item() for row in iter(iter(accessor))] == [0.0, 1.0, 2.0, 3.0]
    assert len(started) == 2
    assert [row.item() for row in accessor] == [0.0, 1.0, 2.0, 3.0]  # a used epoch starts again
    assert len(started) == 3


class Halves(torch.utils.data.IterableDataset[torch.Tensor]):
    """Rows 0-9, the first five from worker 0 and the rest from worker 1 (one process: all ten)."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        rows = range(10) if info is None else range(5 * info.id, 5 * info.id + 5)
        return iter(torch.tensor([[float(row)] for row in rows]))

    def __len__(self) -> int:
        return 10


@pytest.mark.parametrize(
    ("mode", "drop_last", "sizes"),
    [
        # torch hands out each worker's incomplete last batch (or drops both)...
        pytest.param(DataLoaderMode.Sync, False, [4, 4, 1, 1], id="Sync"),
        pytest.param(DataLoaderMode.Sync, True, [4, 4], id="Sync-drop_last"),
        # ... poptorch's rebatching makes batches from their rows together (_dataloader.py:531-556), and Async
        # without drop_last rebatches too (__init__.py:425-431).
        pytest.param(DataLoaderMode.AsyncRebatched, False, [4, 4, 2], id="AsyncRebatched"),
        pytest.param(DataLoaderMode.AsyncRebatched, True, [4, 4], id="AsyncRebatched-drop_last"),
        pytest.param(DataLoaderMode.Async, False, [4, 4, 2], id="Async"),
        pytest.param(DataLoaderMode.Async, True, [4, 4], id="Async-drop_last"),
    ],
)
def test_async_rebatched_makes_batches_from_the_rows_of_every_worker(
    mode: DataLoaderMode, drop_last: bool, sizes: list[int]
) -> None:
    loader = DataLoader(Options(), Halves(), batch_size=4, num_workers=2, drop_last=drop_last, mode=mode)
    batches = [batch.clone() for batch in loader]
    assert [len(batch) for batch in batches] == sizes
    rows = sorted(int(row) for batch in batches for row in batch.flatten())
    assert len(set(rows)) == len(rows)
    if mode != DataLoaderMode.Sync:
        assert len(loader) == len(sizes)  # the samples over the combined batch size (__init__.py:468-480)


def test_rebatched_worker_size_sets_the_batches_torch_loads() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(10.0))
    loader = DataLoader(Options(), data, batch_size=4, mode=DataLoaderMode.AsyncRebatched, rebatched_worker_size=3)
    assert loader.batch_size == 3 and not loader.drop_last
    assert [batch[0].tolist() for batch in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    with pytest.raises(AssertionError, match=r"rebatched_worker_size \(5\) must be <= to the combined batch size"):
        DataLoader(Options(), data, batch_size=4, mode=DataLoaderMode.AsyncRebatched, rebatched_worker_size=5)
