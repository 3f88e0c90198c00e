"""The emulated HPU's device memory size and the SDK's out-of-memory error when it is full.

``LIGHTNING_ACCEL_EMULATE_HPU_MEMORY`` is read when the emulated SDK loads, so the tests that set it run the SDK in a
child process. The error is the bridge's (gaudi-pytorch-bridge bcc5172, ``device_memory.cpp``, ``PT_DEVMEM_FATAL``):
a ``RuntimeError``, not ``torch.OutOfMemoryError``, reading
``"[Rank:<RANK>] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::<bytes> (<MiB>)MB"``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import torch
from _emulator_helpers import PYTHON, script_env

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana_emulator import _device_memory, _native

pytestmark = pytest.mark.emulator_only

MEMORY_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_MEMORY"
GIB, MIB = 2**30, 2**20
ACCEPTED = (
    "Accepted: 'gaudi2' (96 GiB), 'gaudi3' (128 GiB) (any case), or a size above 0: bytes ('1048576') or a number "
    "with a unit, KiB/MiB/GiB/TiB (powers of 1024) or KB/MB/GB/TB (powers of 1000), e.g. '24GiB', '512MiB'; unset it "
    "to give the device the memory of the emulated generation (LIGHTNING_ACCEL_EMULATE_HPU_TYPE)."
)


def _run(probe: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", probe], env=script_env(**env), capture_output=True, text=True, timeout=300, check=False
    )


# --- the setting -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("gaudi2", 96 * GIB),
        ("GAUDI3", 128 * GIB),
        ("24GiB", 24 * GIB),
        ("512MiB", 512 * MIB),
        (" 8 mib ", 8 * MIB),
        ("1.5GiB", 3 * GIB // 2),
        ("64KiB", 64 * 1024),
        ("2GB", 2 * 10**9),
        ("1048576", MIB),
        ("1TiB", 2**40),
    ],
)
def test_a_generation_or_a_size_names_the_device_memory(value: str, size: int) -> None:
    assert _device_memory.parse_device_memory(value) == size


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("lots", "is not a device memory size"),
        ("gaudi", "is not a device memory size"),
        ("-1GiB", "is not a device memory size"),
        ("12 parsecs", "is not a device memory size"),
        ("1.5", "is not a whole number of bytes"),
        ("0", "leaves the device no memory"),
        ("0.4B", "leaves the device no memory"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_the_value_and_what_is_accepted(value: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _device_memory.parse_device_memory(value)
    assert str(refused.value) == f"{MEMORY_VAR}={value!r} {why}. {ACCEPTED}"


_LIMIT_PROBE = (
    "import json, habana_frameworks.torch.hpu as hpu\n"
    "print(json.dumps([hpu.memory_stats()['Limit'], list(hpu.mem_get_info()), hpu.memory_reserved()]))\n"
)


@pytest.mark.parametrize(
    ("env", "limit"),
    [
        ({}, 96 * GIB),  # a Gaudi2 by default, with a Gaudi2's memory
        ({"LIGHTNING_ACCEL_EMULATE_HPU_TYPE": "gaudi3"}, 128 * GIB),
        ({"LIGHTNING_ACCEL_EMULATE_HPU_TYPE": "gaudi3", MEMORY_VAR: "24GiB"}, 24 * GIB),
        ({MEMORY_VAR: "gaudi3"}, 128 * GIB),
    ],
    ids=["default-gaudi2", "default-gaudi3", "size-wins-over-generation", "named-generation"],
)
def test_the_limit_the_sdk_reports_is_the_device_memory(env: dict[str, str], limit: int) -> None:
    env = {MEMORY_VAR: "", **env}
    done = _run(_LIMIT_PROBE, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    reported, (free, total), reserved = json.loads(done.stdout.splitlines()[-1])
    assert reported == total == reserved == limit
    assert 0 <= limit - free < MIB  # only what loading the SDK put on the device is in use


def test_a_bad_value_fails_the_sdk_load_naming_the_variable() -> None:
    done = _run("import habana_frameworks.torch.hpu\n", **{MEMORY_VAR: "24 gigs"})
    assert done.returncode != 0
    assert "ConfigurationError" in done.stderr
    assert f"{MEMORY_VAR}='24 gigs' is not a device memory size. {ACCEPTED}" in done.stderr


# --- the SDK's out-of-memory error ---------------------------------------------------------------------------------


@pytest.fixture
def small_device() -> Iterator[int]:
    """This process's device, given 4 MiB more than it holds now; its memory restored after."""
    import habana_frameworks.torch.hpu as hpu

    free = 4 * MIB
    _native.device().set_memory_limit(hpu.memory_allocated() + free)
    try:
        yield free
    finally:
        _native.device().set_memory_limit(_device_memory.device_memory())


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (5 * MIB, "size::5242880 (5)MB"),
        (9 * MIB // 2, "size::4718592 (4.5)MB"),
        (3 * 10**6 + 2 * MIB, "size::5097152 (4.86102)MB"),  # std::ostream's 6 significant digits, as the bridge's
    ],
)
def test_a_full_device_raises_the_sdks_runtime_error_with_its_text(small_device: int, nbytes: int, text: str) -> None:
    import habana_frameworks.torch.hpu as hpu

    before = hpu.memory_stats()
    with pytest.raises(RuntimeError) as full:
        torch.empty(nbytes, dtype=torch.uint8, device="hpu")
    assert type(full.value) is RuntimeError  # the bridge's c10::Error, not torch.OutOfMemoryError
    assert full.value.args == (f"[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for {text}",)
    after = hpu.memory_stats()
    assert (after["InUse"], after["NumAllocs"]) == (before["InUse"], before["NumAllocs"])  # nothing was counted


def test_memory_freed_after_the_error_can_be_allocated_again(small_device: int) -> None:
    held = torch.empty(3 * MIB, dtype=torch.uint8, device="hpu")
    with pytest.raises(RuntimeError, match="Allocation failed for size::2097152 "):
        torch.empty(2 * MIB, dtype=torch.uint8, device="hpu")
    # An operator's output fails the same way (the host kernel's result, adopted as device memory).
    with pytest.raises(RuntimeError, match="Allocation failed for size::2097152 "):
        held[: 2 * MIB].add(1)
    del held
    assert torch.ones(4 * MIB - 64, dtype=torch.uint8, device="hpu").sum().item() == 4 * MIB - 64


def test_the_error_names_the_processes_rank_and_the_sizes_the_variable_gives() -> None:
    probe = (
        "import torch, habana_frameworks.torch.hpu as hpu\n"
        "held = torch.empty(3 * 2**20, dtype=torch.uint8, device='hpu')\n"
        "try:\n"
        "    torch.zeros(1000, 1000, device='hpu')\n"
        "except RuntimeError as exc:\n"
        "    print(type(exc).__name__, exc.args[0])\n"
    )
    done = _run(probe, **{MEMORY_VAR: "4MiB", "RANK": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == (
        "RuntimeError [Rank:3] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::4000000 (3.8147)MB"
    )
