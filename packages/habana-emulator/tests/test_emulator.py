"""The SDK emulator on its own: lazy mode, device queries, RNG, memory statistics, HCCL set-up."""

from __future__ import annotations

import os
import subprocess

import habana_frameworks.torch.core as htcore  # the emulated SDK, by its own names
import habana_frameworks.torch.distributed.hccl as hccl_module
import habana_frameworks.torch.hpu as hpu_module
import pytest
import torch
from _emulator_helpers import PYTHON, script_env

from lightning_accel.habana_emulator import core as emulated_core
from lightning_accel.habana_emulator.hpu import _devices as emulated_device

HPU = torch.device("hpu")

# Reads the emulator's internals (or stands in for the SDK): not a test of real hardware.
pytestmark = pytest.mark.emulator_only

_MODE_PROBE = (
    "import habana_frameworks.torch.core as htcore, habana_frameworks.torch.hpu as hpu\n"
    "print(htcore.is_lazy(), hasattr(hpu, 'wrap_in_hpu_graph'), hasattr(hpu, 'HPUGraph'))\n"
    "import os; os.environ['PT_HPU_LAZY_MODE'] = '1' if not htcore.is_lazy() else '0'\n"
    "print(htcore.is_lazy())\n"
)


# The graph APIs are exported in both modes from the SDK 1.24 period on (bridge bcc5172 hpu/__init__.py:46; 1.19.0
# exported them in lazy mode only); creating a graph in eager mode raises instead (test_hpu_graph_fidelity.py).
@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "False True True\nFalse"), ("0", "False True True\nFalse"), ("1", "True True True\nTrue")],
)
def test_the_mode_is_read_once_at_load_eager_by_default_graph_apis_in_both_modes(
    value: str | None, expected: str
) -> None:
    env = script_env()
    env.pop("PT_HPU_LAZY_MODE", None)
    if value is not None:
        env["PT_HPU_LAZY_MODE"] = value
    done = subprocess.run([PYTHON, "-c", _MODE_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == expected


def test_an_invalid_mode_is_refused_at_load_naming_the_variable() -> None:
    env = script_env(PT_HPU_LAZY_MODE="lazy")
    done = subprocess.run([PYTHON, "-c", _MODE_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "PT_HPU_LAZY_MODE='lazy' is not a mode. Accepted: '0'" in done.stderr


# What a load does under each emulated torch build (LIGHTNING_ACCEL_EMULATE_HPU_TORCH); lazy mode loads at the first
# `import habana_frameworks.torch`, eager mode already at `import torch`.
_BUILD_PROBE = (
    "import os, torch, torch.distributed as dist\n"
    "try:\n"
    "    import habana_frameworks.torch.core as htcore\n"
    "    print('LOADED', htcore.is_lazy())\n"
    "except Exception as exc:\n"
    "    print('REFUSED', type(exc).__name__, exc)\n"
    "    print('AFTER', os.environ.get('HABANA_PROFILE'), 'hccl' in dist.Backend.backend_list)\n"
)


def _build_probe(**variables: str) -> list[str]:
    env = script_env(**variables)
    for name in ("PT_HPU_LAZY_MODE", "LIGHTNING_ACCEL_EMULATE_HPU_TORCH", "HABANA_PROFILE", "PT_HPU_AUTOLOAD"):
        if name not in variables:
            env.pop(name, None)
    done = subprocess.run([PYTHON, "-c", _BUILD_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


@pytest.mark.parametrize(
    ("build", "mode", "expected"),
    [
        (None, "1", "LOADED True"),  # Intel's torch build by default: lazy mode loads
        ("intel", "1", "LOADED True"),
        ("Intel", "0", "LOADED False"),
        ("upstream", "0", "LOADED False"),  # eager mode loads on either build
        ("upstream", None, "LOADED False"),
    ],
)
def test_the_emulated_torch_build_allows_lazy_mode_on_intels_build(
    build: str | None, mode: str | None, expected: str
) -> None:
    variables = {"LIGHTNING_ACCEL_EMULATE_HPU_TORCH": build, "PT_HPU_LAZY_MODE": mode}
    assert _build_probe(**{k: v for k, v in variables.items() if v is not None}) == [expected]


def test_lazy_mode_is_refused_at_load_on_upstream_torch_before_anything_else() -> None:
    # bcc5172 torch/__init__.py:53-54: the SDK's AssertionError, before the library, core and hccl load.
    lines = _build_probe(LIGHTNING_ACCEL_EMULATE_HPU_TORCH="upstream", PT_HPU_LAZY_MODE="1")
    assert lines == [
        f"REFUSED AssertionError Lazy mode (PT_HPU_LAZY_MODE=1) is not supported on upstream PyTorch "
        f"{torch.__version__}: the Habana SDK loads lazy mode only on Intel's PyTorch build, and this emulator plays "
        "PyPI's upstream build (LIGHTNING_ACCEL_EMULATE_HPU_TORCH=upstream). Run in eager mode (unset "
        "PT_HPU_LAZY_MODE or set it to 0), or set LIGHTNING_ACCEL_EMULATE_HPU_TORCH=intel (the default) to emulate "
        "Intel's build, where lazy mode loads.",
        "AFTER None False",  # no HABANA_PROFILE default, no "hccl" backend: the load stopped first
    ]


def test_an_unknown_torch_build_is_refused_at_load_naming_the_variable() -> None:
    lines = _build_probe(LIGHTNING_ACCEL_EMULATE_HPU_TORCH="pypi")
    assert lines[0] == (
        "REFUSED ConfigurationError LIGHTNING_ACCEL_EMULATE_HPU_TORCH='pypi' names no torch build the emulated Habana "
        "SDK can stand on. Accepted (any case): 'intel' (Intel's torch build, as Intel's installer and containers "
        "ship it: lazy mode loads); 'upstream' (PyPI's upstream CPU build of torch: the SDK refuses lazy mode when it "
        "loads). Unset it to emulate Intel's build."
    )


def test_mark_step_counts_only_in_lazy_mode(lazy_mode: None) -> None:
    before = emulated_core._marked_steps()
    htcore.mark_step()
    htcore.mark_step(sync=True)
    assert emulated_core._marked_steps() == before + 2
    emulated_core._load_mode(False)
    htcore.mark_step()
    assert emulated_core._marked_steps() == before + 2


def test_device_queries(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", "4")
    hpu = hpu_module
    assert hpu.is_available() is True
    assert hpu.device_count() == 4
    assert hpu.get_device_name() == "GAUDI2 (emulated)"
    assert hpu.hpu is hpu  # the SDK's self-reference, used as torch_hpu.hpu.memory_stats()
    # The SDK's rules: with fewer than 8 HPUs, an index other than 0 names a module only through
    # HABANA_VISIBLE_MODULES; the process's tensors stay on hpu:0, which current_device() names.
    clean_env.delenv("HLS_MODULE_ID", raising=False)
    with pytest.raises(AssertionError, match=r"^As HABANA_VISIBLE_MODULES is not provided, the only supported device"):
        hpu.set_device(3)
    clean_env.setenv("HABANA_VISIBLE_MODULES", "0,1,2,3")
    hpu.set_device(3)
    assert (hpu.current_device(), emulated_device.module_id()) == (0, 3)
    assert os.environ["HLS_MODULE_ID"] == "3"
    clean_env.delenv("HABANA_VISIBLE_MODULES")
    clean_env.delenv("HLS_MODULE_ID")
    hpu.set_device("hpu:0")
    assert (hpu.current_device(), emulated_device.module_id()) == (0, 0)
    with pytest.raises(
        ValueError, match=r"device=4 is out of range: 4 HPU\(s\) are visible, so accepted indices are 0 to 3"
    ):
        hpu.set_device(4)
    with pytest.raises(ValueError, match=r"device='cuda:0' is not an HPU device"):
        hpu.set_device("cuda:0")
    hpu.synchronize()


def test_visible_modules_restrict_the_count(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HABANA_VISIBLE_MODULES", "0,2")
    assert hpu_module.device_count() == 2
    clean_env.setenv("HABANA_VISIBLE_MODULES", "0,9")
    with pytest.raises(ValueError, match=r"HABANA_VISIBLE_MODULES='0,9' names module\(s\) '9'"):
        hpu_module.device_count()


def test_rng_state_round_trip_reproduces_draws() -> None:
    hpu = hpu_module
    hpu.manual_seed(1234)
    assert hpu.initial_seed() == 1234
    state = hpu.get_rng_state()
    first = torch.rand(5, device=HPU)
    hpu.set_rng_state(state)
    again = torch.rand(5, device=HPU)
    assert torch.equal(first, again)
    hpu.manual_seed(99)
    assert not torch.equal(torch.rand(5, device=HPU), first)
    with pytest.raises(TypeError, match=r"new_state must be a torch\.ByteTensor"):
        hpu.set_rng_state(torch.zeros(3))


MEMORY_KEYS = {
    "Limit",
    "InUse",
    "MaxInUse",
    "NumAllocs",
    "NumFrees",
    "ActiveAllocs",
    "MaxAllocSize",
    "TotalSystemAllocs",
    "TotalSystemFrees",
    "TotalActiveAllocs",
}


def test_memory_stats_follow_real_allocations() -> None:
    hpu = hpu_module
    base = hpu.memory_stats()
    assert set(base) == MEMORY_KEYS
    assert base["Limit"] > 0
    big = torch.empty(4 * 1024 * 1024, dtype=torch.uint8, device=HPU)  # 4 MiB
    grown = hpu.memory_stats()
    # Exact accounting of the device's allocations: one allocation of exactly 4 MiB.
    assert grown["InUse"] == base["InUse"] + big.numel()
    assert grown["NumAllocs"] == base["NumAllocs"] + 1
    assert grown["ActiveAllocs"] == base["ActiveAllocs"] + 1
    assert grown["MaxAllocSize"] >= big.numel()
    assert grown["MaxInUse"] >= grown["InUse"]
    assert hpu.memory_allocated() >= big.numel()
    del big
    freed = hpu.memory_stats()
    assert freed["NumFrees"] == grown["NumFrees"] + 1
    assert freed["InUse"] == base["InUse"]
    # The peak remembers the big tensor until it is reset.
    assert hpu.max_memory_allocated() >= grown["InUse"]
    hpu.reset_peak_memory_stats()
    assert hpu.max_memory_allocated() < grown["InUse"]


def test_a_host_view_keeps_the_device_memory_it_views_alive() -> None:
    # A host library can still hold the view after the HPU tensor is dropped (an asynchronous collective whose input
    # the caller let go, as torch's bf16_compress_hook does): the memory must stay the device's until the view dies.
    from lightning_accel.habana_emulator import _native

    base = hpu_module.memory_stats()["InUse"]
    view = _native.backing_alias(torch.full((1024,), 3.0, device=HPU))  # the HPU tensor is a temporary
    assert hpu_module.memory_stats()["InUse"] == base + 4096
    assert view.sum().item() == 3.0 * 1024
    del view
    assert hpu_module.memory_stats()["InUse"] == base


def test_memory_stats_see_gradients() -> None:
    layer = torch.nn.Linear(256, 256).to(HPU)
    before = hpu_module.memory_allocated()
    layer(torch.randn(8, 256, device=HPU)).sum().backward()
    # The gradients (weight + bias) stay on the device; the activations of the step are freed.
    assert hpu_module.memory_allocated() == before + 4 * (256 * 256 + 256)


def test_initialize_distributed_hpu_sets_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID", "HABANA_VISIBLE_MODULES"):
        clean_env.delenv(name, raising=False)
    hccl = hccl_module
    assert hccl.initialize_distributed_hpu(world_size=4, rank=3, local_rank=1) == (4, 3, 1)
    assert (os.environ["WORLD_SIZE"], os.environ["RANK"], os.environ["LOCAL_RANK"]) == ("4", "3", "1")
    assert os.environ["HLS_MODULE_ID"] == "1"
    assert os.environ["ID"] == "3"
    assert "hccl" in torch.distributed.Backend.backend_list


def test_initialize_distributed_hpu_reads_mpi_variables(clean_env: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID", "MASTER_ADDR", "MASTER_PORT"):
        clean_env.delenv(name, raising=False)
    clean_env.setenv("OMPI_COMM_WORLD_SIZE", "2")
    clean_env.setenv("OMPI_COMM_WORLD_RANK", "1")
    clean_env.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert hccl_module.initialize_distributed_hpu() == (2, 1, 1)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("localhost", "12345")


def test_initialize_distributed_hpu_fails_with_too_few_devices(clean_env: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ID", "HLS_MODULE_ID"):
        clean_env.delenv(name, raising=False)
    clean_env.setenv("HABANA_VISIBLE_MODULES", "0,1")
    with pytest.raises(
        AssertionError,
        match=r"There is not enough devices available for training\. Please verify if "
        r"HABANA_VISIBLE_MODULES is set correctly\.",
    ):
        hccl_module.initialize_distributed_hpu(world_size=4, rank=2, local_rank=2)


# --- what DeepSpeed's HPU accelerator calls ------------------------------------------------------------------------


def test_fused_adamw_op_matches_torch_adamw(lazy_mode: None) -> None:  # the lazy schema: a float decay
    torch.manual_seed(0)
    lr, betas, eps, weight_decay, steps = 0.01, (0.9, 0.999), 1e-8, 0.1, 3
    reference = torch.nn.Parameter(torch.randn(5, 3))
    fused = torch.nn.Parameter(reference.detach().clone().to(HPU))
    optimizer = torch.optim.AdamW([reference], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    exp_avg = torch.zeros_like(fused)
    exp_avg_sq = torch.zeros_like(fused)
    for step in range(1, steps + 1):
        grad = torch.randn(5, 3)
        reference.grad = grad
        optimizer.step()
        # As DeepSpeed's HPU FusedAdam calls it: bias correction folded into the step, decay as a multiplier.
        step_size = lr * (1 - betas[1] ** step) ** 0.5 / (1 - betas[0] ** step)
        neg_step = torch.tensor([-step_size], device=HPU)
        torch.ops.hpu.optimizer_adamw(
            [grad.to(HPU)], [fused], [exp_avg], [exp_avg_sq], neg_step, *betas, eps, 1.0 - weight_decay * lr
        )
    assert fused.device.type == "hpu"
    torch.testing.assert_close(fused.detach().cpu(), reference.detach())


def test_pinned_host_memory_for_the_hpu() -> None:
    host = torch.randn(8)
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned.pin_memory() is pinned
    assert pinned.device.type == "cpu" and torch.equal(pinned, host)


def test_streams_and_events_for_deepspeed() -> None:
    hpu = hpu_module
    stream = hpu.current_stream()
    assert isinstance(stream, torch.Stream) and stream == hpu.default_stream()
    tensor = torch.ones(4, device=HPU)
    tensor.record_stream(stream)  # ZeRO-3 records its buffers on the current stream
    start, end = htcore.hpu.Event(enable_timing=True), hpu.Event(enable_timing=True)
    with hpu.stream(hpu.Stream()):
        start.record()
        end.record()
    assert end.query() and end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    assert hpu.memory_reserved() >= hpu.memory_allocated() > 0
    # The HPU has a generator of its own, as on the SDK: not the host's.
    generator = hpu.random.default_generators[0]
    assert generator is not torch.default_generator and generator.device == torch.device("hpu", 0)
