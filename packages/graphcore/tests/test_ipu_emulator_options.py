"""poptorch.Options: storage, type checks, freezing, cloning, serialisation and the environment variables."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch


def test_setters_chain_and_take_effect(poptorch: ModuleType) -> None:
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2).autoRoundNumIPUs(True)
    opts.Training.gradientAccumulation(8).accumulationAndReplicationReductionType(poptorch.ReductionType.Sum)
    # What the options do, not what they store: one host batch carries micro x iterations x replicas x accumulation.
    loader = poptorch.DataLoader(opts, torch.utils.data.TensorDataset(torch.arange(3 * 128.0)), batch_size=2)
    assert loader.combinedBatchSize == 2 * 4 * 2 * 8
    assert [len(batch[0]) for batch in loader] == [128, 128, 128]
    # (The reduction type's effect on the weights is checked in test_ipu_emulator_training.py.)


@pytest.mark.parametrize("bad", ["4", 2.0])
def test_wrong_types_fail_poptorchs_assert(poptorch: ModuleType, bad: object) -> None:
    # poptorch 3.4 checks option types with assert (_options_impl.py:70-80).
    with pytest.raises(AssertionError, match=r"Unexpected type .* for option device_iterations"):
        poptorch.Options().deviceIterations(bad)


def test_a_bool_is_an_int_as_in_poptorch(poptorch: ModuleType) -> None:
    # isinstance(True, int): poptorch accepts deviceIterations(True), and so does the emulator.
    executor = poptorch.inferenceModel(torch.nn.Identity(), poptorch.Options().deviceIterations(True))
    assert executor(torch.ones(3, 1)).shape == (3, 1)


def test_unknown_attribute(poptorch: ModuleType) -> None:
    with pytest.raises(AttributeError, match=r"Invalid attribute not_an_option\."):
        _ = poptorch.Options().not_an_option


def test_no_reduction_is_refused(poptorch: ModuleType) -> None:
    with pytest.raises(
        ValueError, match=r"must be set to poptorch\.ReductionType\.Mean or poptorch\.ReductionType\.Sum"
    ):
        poptorch.Options().Training.accumulationAndReplicationReductionType(poptorch.ReductionType.NoReduction)


def test_options_freeze_once_used_and_clone_unfrozen(poptorch: ModuleType) -> None:
    opts = poptorch.Options()
    poptorch.DataLoader(opts, torch.utils.data.TensorDataset(torch.zeros(4, 1)))
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.deviceIterations(2)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.Training.gradientAccumulation(2)
    clone = opts.clone()
    clone.deviceIterations(2).Training.gradientAccumulation(2)
    assert (opts.device_iterations, clone.device_iterations) == (1, 2)


def test_executor_freezes_options_and_resolves_the_default_output_mode(poptorch: ModuleType) -> None:
    opts = poptorch.Options()
    executor = poptorch.inferenceModel(torch.nn.Identity(), opts)
    with pytest.raises(AttributeError, match="frozen"):
        opts.replicationFactor(2)
    with pytest.raises(AssertionError, match="An output mode must be picked before serialisation"):
        opts.toDict()
    assert executor.options.toDict()["output_mode"] == poptorch.OutputMode.All
    training = poptorch.trainingModel(torch.nn.Linear(1, 1), poptorch.Options())
    assert training.options.toDict()["output_mode"] == poptorch.OutputMode.Final


def test_anchor_mode_is_gone_as_in_poptorch_3(poptorch: ModuleType) -> None:
    # poptorch removed anchorMode/AnchorMode in 2.5 (commit 8e9693eb); OutputMode and outputMode replace them.
    assert not hasattr(poptorch, "AnchorMode")
    with pytest.raises(AttributeError, match=r"^Invalid attribute anchorMode\.$"):
        poptorch.Options().anchorMode  # noqa: B018 - the read raises


def test_every_n_needs_a_period(poptorch: ModuleType) -> None:
    with pytest.raises(AssertionError, match="output_return_period"):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)


def test_executable_caching(poptorch: ModuleType, tmp_path: object) -> None:
    opts = poptorch.Options().enableExecutableCaching(str(tmp_path))
    assert opts._Popart.options["enableEngineCaching"] is True
    assert opts.clone().enableExecutableCaching(None)._Popart.options["enableEngineCaching"] is False


def test_default_options_from_the_environment(poptorch: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "POPTORCH_DEFAULT_OPTIONS",
        '{"deviceIterations": 8, "Training.gradientAccumulation": 4, "outputMode": "OutputMode.Sum"}',
    )
    opts = poptorch.Options()
    assert (opts.device_iterations, opts.Training.gradient_accumulation) == (8, 4)
    assert opts.output_mode == poptorch.OutputMode.Sum


def test_random_seed_seeds_torch(poptorch: ModuleType) -> None:
    poptorch.Options().randomSeed(7)
    first = torch.rand(2)
    poptorch.Options().randomSeed(7)
    assert torch.equal(first, torch.rand(2))
