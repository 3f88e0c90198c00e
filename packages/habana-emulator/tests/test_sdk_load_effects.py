"""Loading the SDK does to a process what gaudi-pytorch-bridge 1.19.0 does, at the same moment: at the end of
``import torch`` in eager mode (torch's device-backend autoload), at the first ``import habana_frameworks.torch`` in
lazy mode. Each effect is probed in a fresh process (docs/emulator.md, "What loading the SDK does", lists them with
their sources).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from _emulator_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only  # a fresh process each, with the variables the SDK reads unset

PROBE = r"""
import json, os, sys
import torch
report = {"loaded_by_import_torch": "habana_frameworks.torch" in sys.modules}
import habana_frameworks.torch  # a no-op in eager mode, the load in lazy mode
import torch.distributed as dist
from torch._dynamo.backends.registry import _COMPILER_FNS
from torch._dynamo import trace_rules
env = {name: os.environ.get(name) for name in (
    "MASTER_ADDR", "MASTER_PORT", "HLS_MODULE_ID", "ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "HABANA_PROFILE",
    "TORCHINDUCTOR_COMPILE_THREADS")}
import habana_frameworks.torch.dynamo.compile_backend.backends as backends  # loaded already: the same module
try:
    dist.init_process_group("hccl", rank=0, world_size=1, device_id=torch.device("hpu", 0))
    device_id = "accepted"
except TypeError as exc:
    device_id = str(exc)
dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)  # no network: one rank
on_hpu = torch.ones(2, device="hpu")
dist.all_reduce(on_hpu)
try:
    dist.all_reduce(torch.ones(2))
    host_collective = "accepted"
except RuntimeError as exc:
    host_collective = str(exc)
report.update(
    env=env,
    hccl_devices=dist.Backend.backend_capability["hccl"],
    host_collective=host_collective,
    hccl_registered="hccl" in dist.Backend.backend_list,
    hpu_backend_registered=_COMPILER_FNS.get("hpu_backend") is backends.hpu_backend,
    device_id=device_id,
    manual_seed_wrapped=torch.manual_seed is not torch.random.manual_seed,
    seed_wrapped=torch.seed is not torch.random.seed,
    pg_default_device_wrapped="habana" in dist.distributed_c10d._get_pg_default_device.__code__.co_filename
        or "_emulator" in dist.distributed_c10d._get_pg_default_device.__code__.co_filename,
    fork_rng_wrapped=torch.random.fork_rng.__code__.co_filename != torch.random.manual_seed.__code__.co_filename,
    collectives_out_of_graphs=all(
        trace_rules.is_callable_disallowed(f) for f in (dist.all_reduce, dist.broadcast, dist.barrier)
    ),
    save_load_wrapped=all(
        f.__code__.co_filename != torch.serialization.__file__ for f in (torch.save, torch.load)
    ),
)
class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(2, 2)
        self.stack = torch.nn.Sequential(torch.nn.Tanh())
report.update(
    child_hooks=[
        (getattr(m, "custom_name", None), len(m._forward_pre_hooks), len(m._forward_hooks))
        for m in (_Net().body, _Net().stack[0])
    ],
    setattr_is_torchs=torch.nn.Module.__setattr__.__code__.co_filename == torch.nn.modules.module.__file__,
)
print("REPORT", json.dumps(report))
"""

UNSET = (
    "MASTER_ADDR", "MASTER_PORT", "HLS_MODULE_ID", "ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "HABANA_PROFILE",
    "TORCHINDUCTOR_COMPILE_THREADS", "PT_HPU_LAZY_MODE", "PT_HPU_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "HABANA_VISIBLE_MODULES", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
)  # fmt: skip


def _probe(**variables: str) -> dict[str, Any]:
    env = {k: v for k, v in script_env().items() if k not in UNSET}
    env.update(variables)
    done = subprocess.run([PYTHON, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


@pytest.fixture(scope="module")
def eager() -> dict[str, Any]:
    return _probe()


@pytest.fixture(scope="module")
def lazy() -> dict[str, Any]:
    return _probe(PT_HPU_LAZY_MODE="1")


def test_in_eager_mode_the_sdk_loads_at_import_torch(eager: dict[str, Any], lazy: dict[str, Any]) -> None:
    assert eager["loaded_by_import_torch"] is True
    assert lazy["loaded_by_import_torch"] is False  # lazy mode: at `import habana_frameworks.torch`


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_loading_sets_the_sdks_environment(mode: str, request: pytest.FixtureRequest) -> None:
    env = request.getfixturevalue(mode)["env"]
    # distributed/hccl/__init__.py:60-81,113: the ranks are not all set, so the rendezvous defaults are filled in.
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("localhost", "12345")
    assert env["HLS_MODULE_ID"] is None and env["ID"] is None  # no local rank, no global rank
    assert env["HABANA_PROFILE"] == "profile_api_light"  # core/__init__.py:121-125,147
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # __init__.py:22-23


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_loading_registers_hccl_and_hpu_backend(mode: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(mode)
    assert report["hccl_registered"] is True  # distributed/hccl/__init__.py:120
    # ... for HPU tensors only: a collective on a host tensor has no backend (torch's own text).
    assert report["hccl_devices"] == ["hpu"]
    assert report["host_collective"] == "No backend type associated with device type cpu"
    assert report["hpu_backend_registered"] is True  # core/__init__.py:55 -> compile_backend/backends.py:47


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_loading_wraps_torch_functions(mode: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(mode)
    # core/torch_overwrites.py:187-257: the SDK's init_process_group has no device_id.
    assert report["device_id"] == "init_process_group() got an unexpected keyword argument 'device_id'"
    assert report["manual_seed_wrapped"] and report["seed_wrapped"]  # :133-147, :489-497
    assert report["pg_default_device_wrapped"]  # :119-129
    assert report["fork_rng_wrapped"]  # :364-382
    assert report["collectives_out_of_graphs"]  # distributed/hccl/__init__.py:123-165
    # :389-432, :501-560: lazy mode only.
    assert report["save_load_wrapped"] is (mode == "lazy")
    # :162-183, :259-282: lazy mode only, a child module (assigned, or added by nn.Sequential) gets the name hooks.
    assert report["setattr_is_torchs"] is (mode == "eager")
    expected = [["body", 1, 1], ["0", 1, 1]] if mode == "lazy" else [[None, 0, 0], [None, 0, 0]]
    assert report["child_hooks"] == expected


def test_a_launched_rank_gets_its_module_and_no_rendezvous_defaults() -> None:
    # torchrun's variables all set: initialize_distributed_hpu() leaves MASTER_* alone, and maps the local rank to
    # its module (_setup_module_id).
    env = _probe(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1")["env"]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (None, None)
    assert (env["HLS_MODULE_ID"], env["ID"]) == ("1", "3")


def test_open_mpis_ranks_are_mapped_and_the_users_own_settings_kept() -> None:
    env = _probe(
        OMPI_COMM_WORLD_RANK="2",
        OMPI_COMM_WORLD_SIZE="4",
        OMPI_COMM_WORLD_LOCAL_RANK="2",
        MASTER_ADDR="10.1.2.3",
        MASTER_PORT="23456",
        HABANA_PROFILE="0",
    )["env"]
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["HLS_MODULE_ID"]) == ("2", "4", "2", "2")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["HABANA_PROFILE"]) == ("10.1.2.3", "23456", "0")
