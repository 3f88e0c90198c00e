"""Issue 30, items 7, 8, 9 and 11: what poptorch 3.4 does and the emulator did not (or did differently).

Each test states poptorch's behaviour with the source it comes from; these hold on poptorch and the emulator alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

# -- 11. torch.return_types, custom argument parsers, cond, poptorch_core, Options texts, optimizer state ----------


def test_torch_return_types_come_back_from_the_device(poptorch: ModuleType) -> None:
    class TopAndMax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.max(x, dim=1), torch.topk(x, 2, dim=1), torch.sort(x, dim=1)

    x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    maximum, top, ordered = poptorch.inferenceModel(TopAndMax())(x)
    assert isinstance(maximum, torch.return_types.max)
    torch.testing.assert_close(maximum.values, torch.tensor([5.0, 6.0]))
    assert maximum.indices.tolist() == [1, 2]
    torch.testing.assert_close(top.values, torch.tensor([[5.0, 3.0], [6.0, 4.0]]))
    torch.testing.assert_close(ordered.values, torch.sort(x, dim=1).values)


class Pair:
    """A custom input type: poptorch takes it once a parser says where its tensors are."""

    def __init__(self, features: torch.Tensor, target: torch.Tensor) -> None:
        self.features = features
        self.target = target


@pytest.fixture
def pair_parser(poptorch: ModuleType) -> Iterator[None]:
    class PairParser(poptorch.ICustomArgParser):
        def yieldTensors(self, struct: Pair) -> Iterator[torch.Tensor]:
            yield struct.features
            yield struct.target

        def reconstruct(self, original: Pair, tensor_iterator: Iterator[torch.Tensor]) -> Pair:
            return Pair(next(tensor_iterator), next(tensor_iterator))

    poptorch.registerCustomArgParser(Pair, PairParser())
    yield
    poptorch.registerCustomArgParser(Pair, None)


def test_a_custom_argument_parser_feeds_a_custom_input_type(poptorch: ModuleType, pair_parser: None) -> None:
    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, pair: Pair) -> Any:
            out = self.fc(pair.features)
            return out, F.mse_loss(out, pair.target)

    model = Regression()
    executor = poptorch.trainingModel(model, poptorch.Options().deviceIterations(2))
    features, target = torch.randn(4, 3), torch.randn(4, 1)
    before = model.fc.weight.detach().clone()
    out, loss = executor(Pair(features, target))
    assert out.shape == (2, 1)  # OutputMode.Final: the last device iteration's micro-batch of 2
    assert loss.shape == ()
    assert not torch.equal(model.fc.weight, before)
    executor.destroy()


def test_a_custom_argument_parser_must_be_an_ICustomArgParser(poptorch: ModuleType) -> None:
    # poptorch 3.4 python/__init__.py:849-852.
    with pytest.raises(poptorch.Error, match=r"^'poptorch_py_error': arg_parser must inherit from ICustomArgParser$"):
        poptorch.registerCustomArgParser(Pair, object())
    poptorch.registerGeometricCustomArgParsers()  # without poptorch_geometric: nothing to do


def test_cond_picks_the_branch_per_micro_batch_in_inference(poptorch: ModuleType) -> None:
    class Choose(torch.nn.Module):
        def forward(self, condition: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return poptorch.cond(condition, lambda a: a * 10, [x], lambda b: b - 1, [x])[0]

    executor = poptorch.inferenceModel(Choose(), poptorch.Options().deviceIterations(2))
    out = executor(torch.tensor([[True], [False]]), torch.tensor([[1.0], [1.0]]))
    assert out.flatten().tolist() == [10.0, 0.0]  # traced once, decided on each micro-batch's value
    out = executor(torch.tensor([[False], [True]]), torch.tensor([[2.0], [2.0]]))
    assert out.flatten().tolist() == [1.0, 20.0]
    executor.destroy()
    # On the host the chosen body runs (ops.py:241-247).
    assert poptorch.cond(torch.tensor(False), lambda a: a, [torch.ones(1)], lambda b: b * 3, [torch.ones(1)]) == [
        torch.tensor([3.0])
    ]


def test_cond_and_for_loop_are_refused_in_training(poptorch: ModuleType) -> None:
    # popart_compiler Compiler.cpp:1487-1488 and 1537-1538; tests/if_test.py::test_cond_training.
    class Model(torch.nn.Module):
        def __init__(self, loop: bool) -> None:
            super().__init__()
            self.layer1 = torch.nn.Linear(4, 4)
            self.loop = loop

        def forward(self, condition: torch.Tensor, x: torch.Tensor) -> Any:
            if self.loop:
                out = poptorch.for_loop(2, self.layer1, [x])[0]
            else:
                out = poptorch.cond(condition, self.layer1, [x], self.layer1, [x])[0]
            return out, poptorch.identity_loss(out, reduction="sum")

    for loop, name in ((False, "cond"), (True, "for_loop")):
        training = poptorch.trainingModel(Model(loop))
        with pytest.raises(poptorch.Error, match=rf"poptorch\.{name}\(\) is only supported in inference\."):
            training(torch.tensor([True]), torch.ones(1, 4))


def test_poptorch_core_error_is_poptorch_error(poptorch: ModuleType) -> None:
    # poptorch 3.4 python/__init__.py:41 imports Error, RecoverableError and UnrecoverableError from poptorch_core.
    assert poptorch.poptorch_core.Error is poptorch.Error
    assert poptorch.poptorch_core.RecoverableError is poptorch.RecoverableError
    assert poptorch.poptorch_core.UnrecoverableError is poptorch.UnrecoverableError


def test_options_errors_have_poptorchs_texts(poptorch: ModuleType) -> None:
    opts = poptorch.Options()
    # options.py:187-188 (no space between "either" and "torch").
    with pytest.raises(ValueError, match=r"^parameter to setPartialsType should be eithertorch\.float or torch\.half$"):
        opts.Precision.setPartialsType(torch.int32)
    # _options_impl.py:146-154: private attributes are declared before the option values.
    with pytest.raises(AttributeError, match=r"^Invalid private attribute _my_flag\. Valid attributes: \["):
        opts.Training._my_flag = True


def test_a_poptorch_optimizer_has_device_state_once_compiled(poptorch: ModuleType) -> None:
    # _on_device_attach marks the host state dirty; state_dict() then reads the device's (_poplar_executor.py:421-437).
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.fc(x), y)

    model = Net()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
    executor = poptorch.trainingModel(model, optimizer=optimizer)
    assert optimizer.state_dict()["ipu_param"] is None
    executor.compile(torch.ones(2, 2), torch.zeros(2, 1))
    state = optimizer.state_dict()
    # PopART's SGD without momentum keeps no state and takes the learning rate as lr * (1 - dampening) / loss_scaling
    # (popart compoundscalarhelper.hpp:75-77; poptorch tests/optimizers_test.py::test_read_ipu_state).
    assert state["ipu_state"] == {}
    assert state["ipu_param"]["scaledLearningRate0___specific___fc.weight"].item() == pytest.approx(0.1)
    executor.destroy()


def test_distribution_argument_checks_do_not_stop_tracing(poptorch: ModuleType) -> None:
    # poptorch turns torch.distributions' validate_args off while tracing (_poplar_executor.py:83-92, 98-100);
    # tests/half_float_test.py::test_distributions_uniform.
    class Noisy(torch.nn.Module):
        def forward(self, low: torch.Tensor) -> torch.Tensor:
            return torch.distributions.Uniform(low, torch.tensor([10.0])).sample((4,))

    validating = torch.distributions.Distribution._validate_args
    executor = poptorch.inferenceModel(Noisy())
    out = executor(torch.tensor([1.0]))
    assert out.shape == (4, 1)
    assert bool(((out >= 1.0) & (out < 10.0)).all())
    assert torch.distributions.Distribution._validate_args == validating  # restored after the trace
    executor.destroy()


# -- 7. inputReplicaGrouping -----------------------------------------------------------------------------------


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        out = self.fc(x)
        return out, F.mse_loss(out, y)


@pytest.mark.parametrize(("group_type", "order"), [("Consecutive", [0, 0, 1, 1]), ("Orthogonal", [0, 1, 0, 1])])
def test_input_replica_grouping_trains_with_each_group_on_its_micro_batch(
    poptorch: ModuleType, group_type: str, order: list[int]
) -> None:
    # 4 replicas in input groups of 2: a host batch holds 2 micro-batches per step, each fed to the 2 replicas of its
    # group (options.py:1474-1506, the batch size at _poplar_executor.py:1510-1515; the groups, enums.py:242-252).
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    y = torch.randn(4, 1, generator=torch.Generator().manual_seed(2))
    opts = (
        poptorch.Options()
        .replicationFactor(4)
        .inputReplicaGrouping(2, getattr(poptorch.CommGroupType, group_type))
        .outputMode(poptorch.OutputMode.All)
    )
    model = Regressor()
    reference = Regressor()
    executor = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    out, loss = executor(x, y)
    # One output and one loss per replica, in replica order.
    assert out.shape == (8, 1)
    with torch.no_grad():
        expected = torch.stack([F.mse_loss(reference.fc(x[2 * g : 2 * g + 2]), y[2 * g : 2 * g + 2]) for g in order])
    torch.testing.assert_close(loss, expected)
    # The mean over the replicas' gradients is the full batch's: one SGD step of the whole batch.
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    F.mse_loss(reference.fc(x), y).backward()
    reference_optimizer.step()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight)
    executor.destroy()
    # Inference: one output per replica too.
    inference = poptorch.inferenceModel(Regressor(), opts)
    assert inference(x, y)[0].shape == (8, 1)
    inference.destroy()


# -- 9. smaller differences: the error class, offline targets, the device generator, six error types ---------------


def test_poptorch_error_is_an_exception_not_a_runtime_error(poptorch: ModuleType) -> None:
    # poptorch.cpp:627: Error is registered with base PyExc_Exception.
    assert issubclass(poptorch.Error, Exception)
    assert not issubclass(poptorch.Error, RuntimeError)
    assert issubclass(poptorch.RecoverableError, poptorch.Error)


def test_an_offline_target_compiles_and_refuses_to_run(poptorch: ModuleType) -> None:
    # _poplar_executor.py:1232-1235 and 1576-1578; tests/options_test.py::test_offline_ipu.
    opts = poptorch.Options().useOfflineIpuTarget()
    inference = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    with pytest.raises(AssertionError, match=r"^Trying to run a model on an offline device \(ConnectionType\.Never\)"):
        inference(torch.ones(1, 2))
    inference.compile(torch.ones(1, 2))
    assert inference.isCompiled()
    assert not inference.isAttachedToDevice()
    with pytest.raises(AssertionError, match=r"^Trying to attach to an offline device \(ConnectionType\.Never\)$"):
        inference.attachToDevice()
    inference.destroy()


def test_the_device_generator_restarts_from_random_seed_at_every_attach(poptorch: ModuleType) -> None:
    # _poplar_executor.py:224-226 caches [random_seed]; _on_device_attach copies it to the device (:431-432).
    class Noise(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand(x.shape)

    executor = poptorch.inferenceModel(Noise(), poptorch.Options().randomSeed(7))
    torch.manual_seed(123)  # the host's draws after the options were made
    first = executor(torch.zeros(1, 4))
    second = executor(torch.zeros(1, 4))
    assert not torch.equal(first, second)  # the device generator moves on between calls
    executor.detachFromDevice()
    torch.rand(10)
    executor.attachToDevice()
    torch.testing.assert_close(executor(torch.zeros(1, 4)), first)
    # The host's generator is the host's: the device's draws do not move it.
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    executor(torch.zeros(1, 4))
    torch.testing.assert_close(torch.rand(3), expected)
    executor.destroy()


def test_six_errors_have_poptorchs_types_and_texts(poptorch: ModuleType) -> None:
    # Options of another type: _poplar_executor.py:147-151.
    with pytest.raises(poptorch.Error, match=r"Invalid type: 'options' is of type <class 'dict'> \(Expected poptorch"):
        poptorch.inferenceModel(torch.nn.Linear(1, 1), {"deviceIterations": 2})
    # identity_loss's reduction: an assert (ops.py:1047).
    with pytest.raises(AssertionError, match=r"^Unsupported reduction type!$"):
        poptorch.identity_loss(torch.ones(2), reduction="max")
    # recomputationCheckpoint of a non-tensor: ops.py:375-377.
    with pytest.raises(ValueError, match=r"^All inputs must be tensors$"):
        poptorch.recomputationCheckpoint(torch.ones(1), 2.0)
    # DataLoader: poptorch checks no mode (anything but Async/AsyncRebatched loads synchronously), and torch refuses
    # persistent workers without workers (__init__.py:312-314, 449-457).
    data = torch.utils.data.TensorDataset(torch.arange(4.0))
    assert len(poptorch.DataLoader(poptorch.Options(), data, batch_size=2, mode="sync")) == 2
    with pytest.raises(ValueError, match=r"persistent_workers option needs num_workers > 0"):
        poptorch.DataLoader(poptorch.Options(), data, batch_size=2, persistent_workers=True)

    # Block ids are not checked when the block is made; the IPU goes to begin_ipu_block(int ...) when the model is
    # traced, whose schema refuses a str (_options_impl.py:251, RegisterAtenOverloads.cpp:888).
    class OnIpu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with poptorch.Block(ipu_id="0"):
                return x * 2

    block = poptorch.Block(user_id=3, ipu_id="0")  # accepted
    assert block is not None
    with pytest.raises(RuntimeError, match=r"begin_ipu_block\(\) Expected a value of type 'int' for argument 'ipu_id'"):
        poptorch.inferenceModel(OnIpu())(torch.ones(1))


# -- 8. DataLoaderMode.Async: poptorch's worker rules and ring buffer ----------------------------------------------


def _numbered(rows: int = 12) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(float(rows)).reshape(rows, 1), torch.arange(rows))


def test_an_async_loader_hands_out_the_sync_batches_with_tuples_as_lists(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(2)
    sync = [batch for batch in poptorch.DataLoader(opts, _numbered(), batch_size=1)]
    loader = poptorch.DataLoader(opts, _numbered(), batch_size=1, mode=poptorch.DataLoaderMode.Async)
    assert len(loader) == len(sync) == 6
    seen = []
    for batch in loader:
        assert isinstance(batch, list)  # the worker sends a flat tuple of tensors; the host gets a list
        seen.append([tensor.clone() for tensor in batch])
    for got, expected in zip(seen, sync):
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    loader.terminate()


def test_an_async_batch_kept_past_next_is_overwritten_by_a_later_one(poptorch: ModuleType) -> None:
    # The host gets views of the ring buffer's slots; a released slot is refilled (_dataloader.py:82-139).
    data = torch.utils.data.DataLoader(_numbered(6), batch_size=1)
    accessor = poptorch.AsynchronousDataAccessor(data, buffer_size=2)
    kept = list(accessor)
    assert [batch[0].item() for batch in kept] == [4.0, 5.0, 4.0, 5.0, 4.0, 5.0]
    assert [[t.item() for t in batch] == [float(i), i] for i, batch in enumerate(accessor)] == [True] * 6  # in time
    accessor.terminate()


def test_an_async_worker_takes_only_a_flat_container_of_tensors(poptorch: ModuleType) -> None:
    # _dataloader.py:358-366: the worker asserts, and the accessor fails to start (:253-256).
    nested = [((torch.ones(1), torch.zeros(1)), torch.ones(1))]
    with pytest.raises(poptorch.Error, match=r"AsynchronousDataAccessor worker thread failed to start"):
        poptorch.AsynchronousDataAccessor(nested)
    # A tuple comes back as a list, a dict as a dict, a tensor as a tensor.
    assert isinstance(next(iter(poptorch.AsynchronousDataAccessor([(torch.ones(1), torch.zeros(1))]))), list)
    assert next(iter(poptorch.AsynchronousDataAccessor([{"x": torch.ones(2)}]))).keys() == {"x"}
    assert isinstance(next(iter(poptorch.AsynchronousDataAccessor([torch.ones(2)]))), torch.Tensor)
    with pytest.raises(poptorch.Error, match=r"AsynchronousDataAccessor worker thread failed to start"):
        poptorch.AsynchronousDataAccessor([])  # "The Dataset is empty"
