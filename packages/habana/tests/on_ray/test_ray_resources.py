"""Ray sees the HPUs as its ``"HPU"`` resource, hands each worker its own card, and RayHPUStrategy checks its worker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _ray_helpers import run_ray_script, worker_reports

from lightning_accel.core.errors import ConfigurationError


def _ray_view(tmp_path: Path, *args: str, **env: str) -> dict[str, object]:
    out = tmp_path / "ray_view.json"
    run = run_ray_script("ray_resources.py", str(out), *args, **env)
    assert run.returncode == 0 and out.exists(), run.stderr[-4000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.emulator_only
def test_ray_counts_the_emulated_hpus_and_gives_each_worker_its_own_card(uninterrupted: Path) -> None:
    # The uninterrupted run (conftest) started its cluster with LIGHTNING_ACCEL_EMULATED_DEVICES=2.
    resources = json.loads((uninterrupted / "whole-resources.json").read_text())
    assert resources["HPU"] == 2
    # The driver opened no HPU before ray.init(), and Ray only labels a node whose HPU is initialised (next test).
    assert not [key for key in resources if key.startswith("accelerator_type:")]
    # Each of the two workers, alive at once, held one HPU: each saw one card, and not the same one.
    reports = worker_reports(uninterrupted, "whole", attempt=0)
    assert [report["visible_hpus"] for report in reports] == [1, 1]
    assert sorted(report["visible_modules"] for report in reports) == ["0", "1"]


@pytest.mark.slow
@pytest.mark.emulator_only
def test_ray_labels_the_node_with_the_device_name_once_the_hpu_is_open(tmp_path: Path) -> None:
    # Ray asks hpu.get_device_name() only if hpu.is_initialized(), which, as on the SDK, becomes true when a query
    # such as hpu.init() opens the card; the name says which Gaudi generation the emulator stands for.
    resources = _ray_view(tmp_path, "--open-hpu-first", LIGHTNING_ACCEL_EMULATED_DEVICES="3")["resources"]
    assert isinstance(resources, dict)
    assert resources["HPU"] == 3
    assert [key for key in resources if key.startswith("accelerator_type:")] == [
        "accelerator_type:Intel-GAUDI2 (emulated)"
    ]


@pytest.mark.slow
@pytest.mark.emulator_only
def test_without_emulation_or_sdk_ray_sees_no_hpu(tmp_path: Path) -> None:
    view = _ray_view(tmp_path, LIGHTNING_ACCEL_EMULATE="0")
    resources = view["resources"]
    assert isinstance(resources, dict)
    assert resources.get("HPU", 0) == 0


@pytest.mark.emulator_only
def test_habana_visible_modules_limits_what_a_process_sees(clean_env: pytest.MonkeyPatch) -> None:
    import habana_frameworks.torch.hpu as hpu

    from lightning_accel.habana import HPUAccelerator

    clean_env.setenv("LIGHTNING_ACCEL_EMULATED_DEVICES", "4")
    clean_env.delenv("HABANA_VISIBLE_MODULES", raising=False)
    assert (hpu.device_count(), HPUAccelerator.auto_device_count()) == (4, 4)
    clean_env.setenv("HABANA_VISIBLE_MODULES", "3")  # what Ray sets for a worker given card 3
    assert (hpu.device_count(), HPUAccelerator.auto_device_count()) == (1, 1)
    # As the SDK's set_device: the index names a visible module, which HLS_MODULE_ID then pins.
    clean_env.delenv("HLS_MODULE_ID", raising=False)
    hpu.set_device(0)
    assert os.environ["HLS_MODULE_ID"] == "3"
    clean_env.setenv("HABANA_VISIBLE_MODULES", "3,x")
    with pytest.raises(ValueError, match=r"HABANA_VISIBLE_MODULES='3,x' names module\(s\) 'x'.*from 0 to 3"):
        hpu.device_count()


def test_a_worker_without_an_hpu_is_refused_with_how_to_reserve_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_accel.habana import ray as habana_ray

    monkeypatch.setattr(habana_ray, "get_device", lambda: torch.device("cpu"))
    with pytest.raises(ConfigurationError, match=r"given no HPU: ray.train.torch.get_device\(\) is cpu.*\"HPU\": 1"):
        habana_ray.ray_worker_hpu()


@pytest.mark.emulator_only
def test_a_worker_that_sees_several_hpus_is_refused(
    clean_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_accel.habana import ray as habana_ray

    monkeypatch.setattr(habana_ray, "get_device", lambda: torch.device("hpu"))
    clean_env.setenv("HABANA_VISIBLE_MODULES", "0,1")
    with pytest.raises(
        ConfigurationError, match=r"sees 2 HPUs \(HABANA_VISIBLE_MODULES='0,1'\).*resources_per_worker=\{\"HPU\": 1\}"
    ):
        habana_ray.ray_worker_hpu()
    clean_env.setenv("HABANA_VISIBLE_MODULES", "1")
    assert habana_ray.ray_worker_hpu() == torch.device("hpu")


def test_the_strategy_refuses_a_missing_or_non_hccl_process_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    from lightning_accel.habana.ray import RayHPUStrategy

    strategy = RayHPUStrategy()
    with pytest.raises(ConfigurationError, match=r"there is none.*TorchConfig\(backend=\"hccl\"\)"):
        strategy._check_ray_process_group()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(ConfigurationError, match=r"backend='gloo'.*torch_config=TorchConfig\(backend='hccl'\)"):
            strategy._check_ray_process_group()
    finally:
        dist.destroy_process_group()
