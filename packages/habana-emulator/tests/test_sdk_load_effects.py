"""Loading the SDK does to a process what gaudi-pytorch-bridge bcc5172 (the 1.24 period) does, at the same moment: at
the end of ``import torch`` in eager mode (torch's device-backend autoload), at the first ``import
habana_frameworks.torch`` in lazy mode. Each effect is probed in a fresh process (docs/emulator.md, "What loading the
SDK does", lists them with their sources).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _emulator_helpers import PYTHON, free_port, script_env

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
    # distributed/hccl/__init__.py:75-95,127: the ranks are not all set, so the rendezvous defaults are filled in.
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("localhost", "12345")
    assert env["HLS_MODULE_ID"] is None and env["ID"] is None  # no local rank, no global rank
    assert env["HABANA_PROFILE"] == "profile_api_light"  # core/__init__.py:117-121,143
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # __init__.py:20-21


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_loading_registers_hccl_and_hpu_backend(mode: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(mode)
    assert report["hccl_registered"] is True  # distributed/hccl/__init__.py:139
    # ... for HPU tensors only: a collective on a host tensor has no backend (torch's own text).
    assert report["hccl_devices"] == ["hpu"]
    assert report["host_collective"] == "No backend type associated with device type cpu"
    assert report["hpu_backend_registered"] is True  # core/__init__.py:53-56 -> compile_backend/backends.py


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_loading_wraps_torch_functions(mode: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(mode)
    assert report["manual_seed_wrapped"] and report["seed_wrapped"]  # core/torch_overwrites.py:149, :524
    assert report["pg_default_device_wrapped"]  # :117-129
    assert report["fork_rng_wrapped"]  # :384-402
    assert report["collectives_out_of_graphs"]  # distributed/hccl/__init__.py:142-188
    # :450-451, :585-586: lazy mode only.
    assert report["save_load_wrapped"] is (mode == "lazy")
    # :184-185, :301-302: lazy mode only, a child module (assigned, or added by nn.Sequential) gets the name hooks.
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


# init_process_group / new_group as bcc5172's wrappers take them (core/torch_overwrites.py:187-277), one rank on a
# HashStore (no network). argv: the backend, then device_id ("none" or a device string).
DIST_PROBE = r"""
import json, sys
import torch
import habana_frameworks.torch  # a no-op in eager mode
import torch.distributed as dist

backend, device = sys.argv[1], sys.argv[2]
device_id = None if device == "none" else torch.device(device)
report = {}
for name, call in (
    ("no_backend", lambda: dist.init_process_group()),
    ("ranks", lambda: dist.init_process_group(backend, _ranks=[0])),  # torch 2.13's, not the SDK's
    ("sort_ranks", lambda: dist.new_group([0], sort_ranks=False)),
):
    try:
        call()
        report[name] = "accepted"
    except TypeError as exc:
        report[name] = str(exc)
report["returned"] = repr(
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device_id)
)
default = dist.distributed_c10d._get_default_group()
report["bound"] = str(default.bound_device_id)
on = "hpu" if backend == "hccl" else "cpu"
tensor = torch.ones(2, device=on)
dist.all_reduce(tensor)
dist.barrier()
# new_group hands torch every value it takes, device_id too, as it is: an index-less HPU is not made hpu:0 there.
group_device = torch.device("hpu", 0) if backend == "hccl" else None
group = dist.new_group([0], group_desc="probe", use_local_synchronization=False, device_id=group_device)
dist.all_reduce(tensor, group=group)
report.update(sum=tensor.cpu().tolist(), group_bound=str(group.bound_device_id))
try:
    dist.new_group([0], device_id=torch.device("hpu"))
    report["index_less"] = "accepted"
except (AssertionError, ValueError) as exc:
    report["index_less"] = f"{type(exc).__name__}: {exc}"
try:
    dist.split_group(split_ranks=[[0]])
    report["split"] = "accepted"
except RuntimeError as exc:
    report["split"] = str(exc)
print("REPORT", json.dumps(report))
"""


def _dist_probe(backend: str, device: str, **variables: str) -> dict[str, Any]:
    env = {k: v for k, v in script_env().items() if k not in UNSET and k != "PT_ENABLE_COMM_GROUP_CACHE"}
    env.update(variables)
    done = subprocess.run(
        [PYTHON, "-c", DIST_PROBE, backend, device], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


def _refused_as_by_the_sdks_wrappers(report: dict[str, Any]) -> None:
    # The wrappers have the SDK's parameters only: a backend is required, torch's newer parameters are refused.
    assert report["no_backend"] == "init_process_group() missing 1 required positional argument: 'backend'"
    assert report["ranks"] == "init_process_group() got an unexpected keyword argument '_ranks'"
    assert report["sort_ranks"] == "new_group() got an unexpected keyword argument 'sort_ranks'"


def test_an_hccl_group_takes_an_index_less_hpu_as_device_id_and_binds_the_first_hpu() -> None:
    # The cache is on by default: the index-less HPU Lightning passes becomes hpu:0 (:246-247) and reaches torch,
    # which binds the default group to it; init_process_group returns None (:263).
    report = _dist_probe("hccl", "hpu")
    _refused_as_by_the_sdks_wrappers(report)
    assert (report["returned"], report["bound"], report["sum"]) == ("None", "hpu:0", [1.0, 1.0])
    # new_group passes device_id on unchanged (:218-220): hpu:0 is the default group's device, the index-less HPU
    # is not (torch's refusal; on Gaudi too).
    assert report["group_bound"] == "hpu:0"
    assert report["index_less"] == "AssertionError: Mismatched bound device between new pg and the default pg."
    # Bound to an HPU, torch would split new groups from the default one's backend, which HCCL's cannot do: gloo,
    # underneath, could, but answers as HCCL's.
    assert report["split"] == "No backend for the parent process group or its backend does not support splitting"


def test_with_the_group_cache_off_init_process_group_drops_device_id() -> None:
    # :264-274: the uncached path hands torch everything but device_id; new_group still passes its own on.
    report = _dist_probe("hccl", "hpu:0", PT_ENABLE_COMM_GROUP_CACHE="false")
    _refused_as_by_the_sdks_wrappers(report)
    assert (report["returned"], report["bound"], report["sum"]) == ("None", "None", [1.0, 1.0])
    assert report["group_bound"] == "hpu:0"
    assert report["index_less"] == (
        "ValueError: init_process_group device_id parameter must be an accelerator with an index"
    )


def test_a_gloo_group_drops_device_id() -> None:
    # Not an "hccl" backend: device_id is dropped whatever it is, even a CPU one, which torch itself refuses
    # ("init_process_group device_id parameter must be an accelerator with an index").
    report = _dist_probe("gloo", "cpu")
    assert (report["returned"], report["bound"], report["sum"]) == ("None", "None", [1.0, 1.0])


def test_a_group_cache_flag_that_is_not_a_boolean_is_refused_naming_it() -> None:
    env = {k: v for k, v in script_env().items() if k not in UNSET}
    env["PT_ENABLE_COMM_GROUP_CACHE"] = "yes"
    done = subprocess.run(
        [PYTHON, "-c", DIST_PROBE, "hccl", "hpu"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert (
        "ValueError: PT_ENABLE_COMM_GROUP_CACHE='yes' is not a boolean. Accepted (any case): 1/true (the SDK's "
        "default: init_process_group and new_group of an 'hccl' group take the cached path, which passes device_id "
        "on) or 0/false (init_process_group drops device_id); unset it for the default."
    ) in done.stderr


# Lightning's DDP on CPU processes, in a process where the emulated SDK has loaded (LIGHTNING_ACCEL_EMULATE=hpu at
# `import torch`): Lightning joins with device_id=None (lightning/pytorch/strategies/ddp.py, setup_distributed),
# which 1.19's wrapper refused with a TypeError. Two real processes (Lightning's script launcher starts rank 1).
CPU_DDP_SCRIPT = r"""
import sys
import torch
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

assert "habana_frameworks.torch" in sys.modules  # the emulated SDK loaded with torch, its wrappers installed
trainer = pl.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_steps=2, limit_val_batches=0, logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(BoringModel())
print(f"RANK {trainer.global_rank} DONE {torch.distributed.get_backend()} {trainer.global_step}")
"""


def test_lightnings_cpu_ddp_runs_in_a_process_with_the_sdk_loaded(tmp_path: Path) -> None:
    script = tmp_path / "cpu_ddp.py"
    script.write_text(CPU_DDP_SCRIPT)
    env = {k: v for k, v in script_env().items() if k not in UNSET}
    # A port of its own: the SDK's load sets MASTER_PORT=12345 otherwise, which Lightning would take.
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run([PYTHON, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RANK 0 DONE gloo 2" in done.stdout
