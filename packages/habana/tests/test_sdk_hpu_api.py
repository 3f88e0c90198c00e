"""The ``hpu`` module behaves as the SDK's (gaudi-pytorch-bridge 1.19.0 ``hpu/__init__.py``, ``memory.py``,
``random.py``), beyond having its names (``test_sdk_api_table.py``): what libraries such as DeepSpeed and Intel's
fork call works as on Gaudi, and what Gaudi lacks is missing here too.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lightning_accel.habana import sdk
from lightning_accel.habana.sdk import hpu


def test_synchronize_takes_no_device() -> None:
    hpu.synchronize()
    with pytest.raises(TypeError):
        hpu.synchronize(0)  # type: ignore[call-arg]


def test_memory_reserved_is_the_allocators_limit_and_free_memory_is_limit_minus_in_use() -> None:
    keep = torch.ones(1024, device="hpu")
    stats = hpu.memory_stats()
    assert hpu.memory_reserved() == hpu.max_memory_reserved() == stats["Limit"]
    free, total = hpu.mem_get_info()
    assert total == stats["Limit"] and free == stats["Limit"] - hpu.memory_allocated() < total
    del keep


def test_memory_cached_is_the_sdks_deprecated_name_and_warns() -> None:
    with pytest.warns(FutureWarning, match="memory_cached has been renamed to torch.hpu.memory_reserved"):
        assert hpu.memory_cached() == hpu.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_cached has been renamed"):
        hpu.max_memory_cached()


def test_names_the_sdk_lacks_are_missing() -> None:
    # Upstream DeepSpeed's HPU accelerator calls reset_max_memory_allocated; on Gaudi that fails, and so it does here.
    for name in ("reset_max_memory_allocated", "visible_device_count", "export_graph_api", "GRAPH_API"):
        assert not hasattr(hpu, name), name


def test_manual_seed_returns_the_generator_and_seeds_what_hpu_tensors_draw() -> None:
    generator = hpu.manual_seed(7)
    assert isinstance(generator, torch.Generator) and generator.initial_seed() == 7 == hpu.initial_seed()
    first = torch.randn(4, device="hpu").cpu()
    hpu.manual_seed(7)
    assert torch.equal(torch.randn(4, device="hpu").cpu(), first)


def test_rng_state_all_round_trips_one_state_per_process() -> None:
    states = hpu.get_rng_state_all()
    assert len(states) == 1
    drawn = torch.randn(3, device="hpu").cpu()
    hpu.set_rng_state_all(states)
    assert torch.equal(torch.randn(3, device="hpu").cpu(), drawn)
    with pytest.raises(RuntimeError, match="supports only states len of 1"):
        hpu.set_rng_state_all(states * 2)
    hpu.seed_all()
    assert isinstance(hpu.seed(), int)


@pytest.mark.emulator_only  # on Gaudi, HLS_MODULE_ID=3 would make the context manager open module 3
def test_device_context_managers_accept_the_process_hpu_and_refuse_another_module(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.delenv("HLS_MODULE_ID", raising=False)
    with hpu.device(0):
        pass
    with hpu.device_of(torch.zeros(1, device="hpu")):
        pass
    with pytest.raises(AssertionError, match="Requested device_id=3 is different from env_device_id=-1"):
        hpu.device(3)
    clean_env.setenv("HLS_MODULE_ID", "3")
    with hpu.device(3):
        pass


def test_the_sdks_small_queries() -> None:
    assert hpu.is_bf16_supported() is True
    assert hpu.is_lazy() is sdk.htcore.is_lazy()
    assert hpu.get_arch_list() == [hpu.get_device_name()]
    assert hpu.get_gencode_flags() == ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hpu.setDeterministic(True)
        assert hpu.getDeterministic() is True
        hpu.setDeterministic(False)
    assert any("setDeterministic is deprecated" in str(w.message) for w in caught)


def test_sync_debug_mode_is_the_sdks_environment_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.delenv("PT_ENABLE_HABANA_STREAMASYNC", raising=False)
    hpu.set_sync_debug_mode(1)
    assert hpu.get_sync_debug_mode() == 1
