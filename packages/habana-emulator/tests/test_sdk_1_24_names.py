"""What the names the SDK gained or changed after 1.19 do on the emulator (gaudi-pytorch-bridge bcc5172, the SDK 1.24
period): the generation rules, ``utils.split_tensor_batch``, ``utils.version_checker``, the quantization attributes of
``utils.experimental``, ``hpu.sdp_kernel`` and its flag, ``hpu.formatted_memory_stats``, ``hpu.setDeterministic``,
``hw_utilization_metric`` and ``distributed.hccl.ProcessGroupHCCL``. That they exist with the SDK's parameters is
``test_sdk_api_table.py``'s part.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import torch
from _emulator_helpers import PYTHON, free_port, script_env

pytestmark = pytest.mark.emulator_only

GENERATION_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_TYPE"


# --- the generation ---------------------------------------------------------------------------------------------

_GENERATION_PROBE = (
    "import habana_frameworks.torch.hpu as hpu, habana_frameworks.torch.utils.experimental as htexp\n"
    "print(hpu.get_device_name(), htexp._get_device_type().name, htexp._is_fp16_supported())\n"
)


def _load(generation: str) -> subprocess.CompletedProcess[str]:
    env = script_env(**{GENERATION_VAR: generation})
    return subprocess.run([PYTHON, "-c", _GENERATION_PROBE], env=env, capture_output=True, text=True, timeout=300)


def test_first_generation_gaudi_is_refused_at_load_naming_the_variable_and_why() -> None:
    done = _load("Gaudi")
    assert done.returncode != 0
    assert "ConfigurationError" in done.stderr
    assert f"{GENERATION_VAR}='Gaudi' is not supported: first-generation Gaudi is not supported" in done.stderr
    assert "Gaudi 2 and Gaudi 3 only from release 1.22" in done.stderr
    assert "Accepted: 'gaudi2', 'gaudi3' (any case)" in done.stderr


def test_an_unknown_generation_is_refused_at_load() -> None:
    done = _load("gaudi5")
    assert done.returncode != 0
    assert f"{GENERATION_VAR}='gaudi5' names no Gaudi generation. Accepted: 'gaudi2', 'gaudi3'" in done.stderr


def test_gaudi3_loads_and_float16_is_supported_whatever_the_generation() -> None:
    import habana_frameworks.torch.utils.experimental as htexp

    # utils/experimental/__init__.py:62-63 at bcc5172: always True.
    assert htexp._is_fp16_supported() is True
    assert htexp._get_device_type() is htexp.synDeviceType.synDeviceGaudi2  # the default generation
    done = _load("gaudi3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["GAUDI3", "(emulated)", "synDeviceGaudi3", "True"]


# --- utils.experimental: the graph attributes of quantized models -------------------------------------------------


@pytest.fixture
def quantization_attributes() -> Iterator[object]:
    import habana_frameworks.torch.utils.experimental as htexp

    saved = (htexp._get_is_dynamic_quantization(), htexp._scale_is_hw_aligned, htexp._get_scale_attribute_hash_id())
    yield htexp
    htexp._set_is_dynamic_quantization(saved[0])
    htexp._set_scale_attributes(saved[1], saved[2])


def test_the_quantization_attributes_inc_sets_are_kept_and_read_back(quantization_attributes: object) -> None:
    htexp = quantization_attributes
    htexp._set_is_dynamic_quantization(True)  # type: ignore[attr-defined]
    assert htexp._get_is_dynamic_quantization() is True  # type: ignore[attr-defined]
    htexp._set_is_dynamic_quantization(False)  # type: ignore[attr-defined]
    assert htexp._get_is_dynamic_quantization() is False  # type: ignore[attr-defined]
    htexp._set_scale_attributes(True, 7)  # type: ignore[attr-defined]
    assert htexp._get_scale_attribute_hash_id() == 7  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"scale_hash_id must be an int .* got 'pow2'"):
        htexp._set_scale_attributes(True, "pow2")  # type: ignore[attr-defined]
    assert htexp._get_scale_attribute_hash_id() == 7  # type: ignore[attr-defined]


# --- utils.split_tensor_batch -------------------------------------------------------------------------------------


class _Halves:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def body(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append(x.shape[0])
        return x * 2, y + 1


def _decorated(**options: object) -> _Halves:
    from habana_frameworks.torch.utils import split_tensor_batch

    halves = _Halves()
    # Used with arguments, the decorator is a method's (the SDK's offset): index 0 is the argument after self.
    halves.run = split_tensor_batch(**options)(_Halves.body).__get__(halves)  # type: ignore[attr-defined]
    return halves


def test_split_tensor_batch_runs_each_slice_and_joins_the_chosen_outputs() -> None:
    x = torch.arange(8.0, device="hpu").reshape(4, 2)
    y = torch.zeros(3, device="hpu")
    halves = _decorated(num_splits=2, split_index_list=[0], cat_out_index_list=[0])
    with torch.no_grad():
        doubled, ys = halves.run(x, y)  # type: ignore[attr-defined]
    assert halves.calls == [2, 2]
    assert torch.equal(doubled.cpu(), (x * 2).cpu())
    assert isinstance(ys, list) and len(ys) == 2 and all(torch.equal(t.cpu(), torch.ones(3)) for t in ys)
    # No list of outputs to join (None, as the SDK reads it: an empty list): every output is joined.
    halves = _decorated(num_splits=2, split_index_list=[0, 1])
    with torch.no_grad():
        doubled, ys = halves.run(x, torch.zeros(4, device="hpu"))  # type: ignore[attr-defined]
    assert halves.calls == [2, 2] and ys.shape == (4,) and torch.equal(doubled.cpu(), (x * 2).cpu())


def test_split_tensor_batch_calls_once_with_autograd_on_or_nothing_to_split() -> None:
    x = torch.ones(4, 2, device="hpu")
    halves = _decorated(num_splits=2, split_index_list=[0])
    out = halves.run(x, x)  # type: ignore[attr-defined]
    assert halves.calls == [4] and isinstance(out, tuple)
    from habana_frameworks.torch.utils import split_tensor_batch

    assert split_tensor_batch(lambda a: a + 1)(1) == 2


def test_split_tensor_batch_takes_a_list_of_tensors_as_the_slices() -> None:
    halves = _decorated(num_splits=2, split_index_list=[0], cat_out_index_list=[0])
    chunks = [torch.ones(1, 2, device="hpu"), torch.full((3, 2), 2.0, device="hpu")]
    with torch.no_grad():
        doubled, _ = halves.run(chunks, torch.zeros(1, device="hpu"))  # type: ignore[attr-defined]
    assert halves.calls == [1, 3] and doubled.shape == (4, 2)


def test_split_tensor_batch_names_a_bad_index_or_argument() -> None:
    x = torch.ones(4, 2, device="hpu")
    with torch.no_grad():
        with pytest.raises(IndexError, match=r"split_index_list contains 5, but the call has 2 positional arguments"):
            _decorated(num_splits=2, split_index_list=[5]).run(x, x)  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match=r"argument at index 1 is neither a tensor nor a non-empty list"):
            _decorated(num_splits=2, split_index_list=[0, 1]).run(x, 3)  # type: ignore[attr-defined]
        with pytest.raises(IndexError, match=r"cat_out_index_list contains 2, but the call has 2 outputs"):
            _decorated(num_splits=2, split_index_list=[0], cat_out_index_list=[2]).run(x, x)  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match=r"different numbers of slices \[2, 1\]"):
            _decorated(num_splits=2, split_index_list=[0, 1]).run(x, [x])  # type: ignore[attr-defined]


# --- utils.version_checker ----------------------------------------------------------------------------------------


def test_is_pytorch_older_than_compares_the_release_of_torch() -> None:
    from habana_frameworks.torch.utils.version_checker import is_pytorch_older_than

    release = torch.__version__.split("+")[0]  # "2.13.0+cpu": the local part does not count
    assert is_pytorch_older_than(release) is False
    assert is_pytorch_older_than("99.0") is True and is_pytorch_older_than("2.0") is False
    with pytest.raises(ValueError, match=r"version='two' is not a version"):
        is_pytorch_older_than("two")


# --- hpu: sdp_kernel, formatted_memory_stats, setDeterministic ----------------------------------------------------


def test_sdp_kernel_switches_the_recompute_flag_inside_its_block_only() -> None:
    import habana_frameworks.torch.hpu as hpu
    import habana_frameworks.torch.hpu.sdp_kernel_flag as flag

    assert hpu.recompute_sdp_enabled() is True and flag.is_recompute_FSDPA_enabled is True
    with hpu.sdp_kernel(enable_recompute=False) as state:
        assert state == {} and hpu.recompute_sdp_enabled() is False and flag.is_recompute_FSDPA_enabled is False
    assert hpu.recompute_sdp_enabled() is True
    with pytest.raises(RuntimeError, match="inside"), hpu.sdp_kernel(enable_recompute=False):
        raise RuntimeError("inside")
    assert hpu.recompute_sdp_enabled() is True
    # The value star-imported into hpu when it loaded, as on the SDK.
    assert hpu.is_recompute_FSDPA_enabled is True
    with pytest.raises(TypeError, match=r"enabled must be True or False \(or None for off\), got 'no'"):
        hpu.enable_recompute_sdp("no")  # type: ignore[arg-type]
    assert hpu.recompute_sdp_enabled() is True


def test_formatted_memory_stats_is_the_sdks_layout_of_memory_stats() -> None:
    import habana_frameworks.torch.hpu as hpu

    keep = torch.ones(512, 1024, device="hpu")  # 2 MiB in use
    text = hpu.formatted_memory_stats()
    stats = hpu.memory_stats()
    lines = text.split("\n")
    assert lines[0] == "    Memory Statistics (Device ID)" + " " * 11 + ":- 0  "
    assert [line.split(":-")[0].strip() for line in lines[1:]] == list(stats)
    in_use = stats["InUse"]
    assert lines[2] == f"    {'InUse':<39} :- {in_use} / {in_use / 1024:.2f}KB / {in_use / 2**20:.2f}MB"
    assert lines[4] == f"    {'NumAllocs':<39} :- {stats['NumAllocs']}"
    del keep


def test_set_deterministic_also_sets_torchs_deterministic_algorithms() -> None:
    import habana_frameworks.torch.hpu as hpu

    before = torch.are_deterministic_algorithms_enabled()
    try:
        with pytest.warns(UserWarning, match="setDeterministic is deprecated"):
            hpu.setDeterministic(True)
        assert torch.are_deterministic_algorithms_enabled() is True
        with pytest.warns(UserWarning, match="getDeterministic is deprecated"):
            assert hpu.getDeterministic() is True
        with pytest.warns(UserWarning):
            hpu.setDeterministic(False)
        assert torch.are_deterministic_algorithms_enabled() is False
    finally:
        torch.use_deterministic_algorithms(before)


# --- hw_utilization_metric, ProcessGroupHCCL ----------------------------------------------------------------------


def test_hw_utilization_metric_is_loaded_with_the_sdk_and_refuses_the_readings_by_name() -> None:
    import habana_frameworks.torch as ht

    from lightning_accel.habana_emulator._not_emulated import NotEmulatedError

    module = ht.hw_utilization_metric  # bound by the SDK's load (its __init__.py imports it), not by this test
    usage = module.Usage(hl_smi=12.5, esync=80.0)
    assert (usage.hl_smi, usage.esync) == (12.5, 80.0)
    with pytest.raises(NotEmulatedError, match=r"hw_utilization_metric[.]HWUtilizationMetrics is not emulated: "):
        module.HWUtilizationMetrics()


_HCCL_PROBE = """
import os, torch, torch.distributed as dist
from habana_frameworks.torch.distributed.hccl import ProcessGroupHCCL
dist.init_process_group("hccl", rank=0, world_size=1)
backend = dist.group.WORLD._get_backend(torch.device("hpu"))
t = torch.ones(3, device="hpu")
dist.all_reduce(t)
print(type(backend).__name__, isinstance(backend, ProcessGroupHCCL), t.cpu().tolist())
dist.destroy_process_group()
"""


def test_the_hccl_backends_process_groups_are_process_group_hccl() -> None:
    env = script_env(MASTER_ADDR="localhost", MASTER_PORT=str(free_port()))
    done = subprocess.run([PYTHON, "-c", _HCCL_PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "ProcessGroupHCCL True [1.0, 1.0, 1.0]"
