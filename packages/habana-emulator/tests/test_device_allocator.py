"""torch's own allocator APIs on the emulated HPU, and the device choices a process may make.

The device's allocator is a c10 ``DeviceAllocator`` and its pinned memory a torch host allocator (registered for
``DeviceType::HPU``, as pytorch's reference out-of-tree device ``torch_openreg`` registers its own), so
``torch.accelerator.memory_*`` read the counters the SDK's ``torch.hpu.memory_*`` read. ``torch.hpu.set_device(n)``
follows the SDK's rules, and tensors stay on ``hpu:0`` (``torch.load(map_location="hpu")`` too); and a failed load at
``import torch`` leaves a ``torch.hpu`` that answers ``is_available()`` and raises the load's error for the rest.
"""

from __future__ import annotations

import io
import os
import subprocess

import pytest
import torch
from _emulator_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only

HPU = torch.device("hpu")


def _both() -> tuple[tuple[int, int], tuple[int, int]]:
    """(allocated, peak) as torch.accelerator reads them, and as the SDK's torch.hpu does."""
    accelerator = (torch.accelerator.memory_allocated(), torch.accelerator.max_memory_allocated())
    sdk = (torch.hpu.memory_allocated(), torch.hpu.max_memory_allocated())
    return accelerator, sdk


def test_torch_accelerator_memory_agrees_with_torch_hpu() -> None:
    assert torch.accelerator.current_accelerator() == torch.device("hpu")
    start = torch.hpu.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    big = torch.empty(1 << 20, dtype=torch.uint8, device=HPU)
    small = torch.empty(1 << 10, dtype=torch.uint8, device=HPU)
    accelerator, sdk = _both()
    assert accelerator == sdk == (start + (1 << 20) + (1 << 10), start + (1 << 20) + (1 << 10))

    del big
    accelerator, sdk = _both()
    assert accelerator == sdk == (start + (1 << 10), start + (1 << 20) + (1 << 10))

    torch.accelerator.reset_peak_memory_stats()  # the peak restarts from the memory in use, for both APIs
    accelerator, sdk = _both()
    assert accelerator == sdk == (start + (1 << 10), start + (1 << 10))

    del small
    torch.hpu.reset_peak_memory_stats()
    accelerator, sdk = _both()
    assert accelerator == sdk == (start, start)


def test_torch_accelerator_memory_stats_count_what_torch_hpu_counts() -> None:
    kept = torch.ones(256, device=HPU)
    stats, sdk = torch.accelerator.memory_stats(), torch.hpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == sdk["InUse"]
    assert stats["allocated_bytes.all.peak"] == sdk["MaxInUse"]
    assert stats["allocation.all.allocated"] == sdk["NumAllocs"]
    assert stats["allocation.all.freed"] == sdk["NumFrees"]
    assert stats["allocation.all.current"] == sdk["ActiveAllocs"]
    # The SDK's allocator takes the whole card: reserved is the Limit in both APIs.
    assert torch.accelerator.memory_reserved() == torch.hpu.memory_reserved() == sdk["Limit"]
    assert torch.accelerator.get_memory_info() == torch.hpu.mem_get_info()
    torch.accelerator.empty_cache()  # nothing is cached: every storage is its own block
    assert torch.hpu.memory_allocated() == sdk["InUse"]
    with pytest.raises(NotImplementedError, match=r"reset_accumulated_memory_stats is not emulated for the HPU"):
        torch.accelerator.reset_accumulated_memory_stats()
    del kept


def test_pinned_memory_comes_from_the_hpu_host_allocator() -> None:
    pinned = torch.empty(64, pin_memory=True)
    moved = torch.arange(8.0).pin_memory()
    assert pinned.is_pinned() and moved.is_pinned()
    assert not torch.ones(8).is_pinned()
    assert moved.device.type == "cpu"
    assert torch.equal(moved.to(HPU, non_blocking=True).cpu(), torch.arange(8.0))
    torch.accelerator.empty_host_cache()  # nothing is cached, and the call is served (not refused)


def _loads_onto_hpu_0() -> bool:
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0), buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="hpu").device == torch.device("hpu", 0)


def test_set_device_follows_the_sdks_rules_and_tensors_stay_on_hpu_0(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match=r"habana active device: 1 != 0"):
        torch.ones(1, device="hpu:1")
    monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)
    monkeypatch.delenv("HLS_MODULE_ID", raising=False)
    try:
        # 8 HPUs (the emulator's default, a Gaudi server's count): the index names a module, pinned for the runtime,
        # as torch's DeviceMesh asks with set_device(local_rank).
        assert torch.hpu.device_count() == 8
        torch.hpu.set_device(1)
        assert os.environ["HLS_MODULE_ID"] == "1"
        assert _loads_onto_hpu_0()
        # A pinned module wins over the index (the SDK's rule), and one that is not visible is its assertion.
        torch.hpu.set_device(0)
        assert os.environ["HLS_MODULE_ID"] == "1"
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", "4,5")
        with pytest.raises(AssertionError, match=r"^Requested module_id=4 is different from current_module_id=1"):
            torch.hpu.set_device(0)
    finally:
        monkeypatch.delenv("HABANA_VISIBLE_MODULES", raising=False)
        monkeypatch.delenv("HLS_MODULE_ID", raising=False)
        torch.hpu.set_device(0)


def test_set_device_names_a_visible_module_as_the_sdk_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "4,5")
    monkeypatch.delenv("HLS_MODULE_ID", raising=False)
    try:
        torch.hpu.set_device(1)
        assert os.environ["HLS_MODULE_ID"] == "5"
        assert _loads_onto_hpu_0()
    finally:
        monkeypatch.delenv("HABANA_VISIBLE_MODULES")
        monkeypatch.delenv("HLS_MODULE_ID", raising=False)
        torch.hpu.set_device(0)


def test_a_failed_load_leaves_torch_hpu_answering_is_available() -> None:
    probe = (
        "import os, torch\n"
        "print(torch.hpu.is_available())\n"
        "try:\n"
        "    torch.hpu.device_count()\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n"
        "del os.environ['LIGHTNING_ACCEL_EMULATE_HPU_MEMORY']\n"
        "import habana_frameworks.torch\n"
        "print(torch.hpu.is_available(), torch.ones(2, device='hpu').device)\n"
    )
    # A device memory size the load refuses: the load fails at `import torch` without a build (the build is cached).
    result = subprocess.run(
        [PYTHON, "-W", "ignore", "-c", probe],
        env=script_env(LIGHTNING_ACCEL_EMULATE_HPU_MEMORY="bad"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False", "ConfigurationError", "True hpu:0"]
