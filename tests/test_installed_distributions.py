"""All distributions installed together from wheels: discovery, entry points and the command line."""

import json
from importlib.metadata import entry_points, version
from pathlib import Path

import lightning_accel.core

CHECKOUT = Path(__file__).resolve().parent.parent

EXPECTED_PLUGINS = {"habana", "graphcore", "deepspeed_hpu", "testplugin"}


def test_installed_from_wheels_not_source() -> None:
    # The environment may live inside the checkout (nox puts it in .nox/), so compare with the source folders.
    imported = Path(lightning_accel.core.__file__).resolve()
    assert CHECKOUT / "packages" not in imported.parents, imported


def test_every_entry_point_resolves() -> None:
    from lightning_accel.core import PluginSpec

    found = {ep.name: ep.load() for ep in entry_points(group="lightning_accel.plugins")}
    assert EXPECTED_PLUGINS <= set(found)
    assert all(isinstance(spec, PluginSpec) for spec in found.values())


def test_list_json_lists_every_installed_plugin(run) -> None:  # type: ignore[no-untyped-def]
    process = run(["-m", "lightning_accel.core.cli", "list", "--json"], env={"LIGHTNING_ACCEL_EMULATE": "hpu"})
    assert process.returncode == 0, process.stderr
    plugins = {plugin["name"]: plugin for plugin in json.loads(process.stdout)["plugins"]}
    assert EXPECTED_PLUGINS <= set(plugins)
    assert plugins["habana"]["availability"]["state"] == "emulated"
    assert plugins["graphcore"]["availability"]["state"] == "unavailable"
    assert "LIGHTNING_ACCEL_EMULATE" in plugins["graphcore"]["availability"]["reason"]


def test_env_json(run) -> None:  # type: ignore[no-untyped-def]
    process = run(["-m", "lightning_accel.core.cli", "env", "--json"], env={"LIGHTNING_ACCEL_EMULATE": "all"})
    report = json.loads(process.stdout)
    assert process.returncode == 0, process.stderr
    assert report["packages"]["torch"] == version("torch")  # what is installed, whatever the machine has
    assert report["packages"]["lightning-accel-core"] == lightning_accel.core.__version__
    assert {"lightning-accel-habana", "lightning-accel-graphcore", "lightning-accel-deepspeed-hpu"} <= set(
        report["plugins"]
    )
    assert report["emulation"]["emulated"] == "all"
    # Each SDK emulator is a distribution of its own, reported for bug reports.
    for emulator in ("lightning-accel-habana-emulator", "lightning-accel-poptorch-emulator"):
        assert report["emulators"][emulator] == version(emulator)


def test_vendor_accelerators_selected_from_a_script_importing_only_lightning(run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "choose_devices.py"
    script.write_text(
        "import lightning as L, pytorch_lightning as pl\n"
        "q = dict(logger=False, enable_progress_bar=False)\n"
        "print(type(L.Trainer(accelerator='hpu', devices=1, **q).strategy).__name__)\n"
        "print(type(L.Trainer(accelerator='hpu', devices=2, **q).strategy).__name__)\n"
        "print(type(pl.Trainer(accelerator='hpu', devices=1, **q).strategy).__name__)\n"
        "print(type(L.Trainer(accelerator='hpu', **q).strategy).__name__)\n"
        "print(type(L.Trainer(accelerator='ipu', devices=8, **q).strategy).__name__)\n"
    )
    process = run([str(script)], env={"LIGHTNING_ACCEL_EMULATE": "hpu,ipu"}, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.split() == [
        "SingleHPUStrategy",
        "HPUParallelStrategy",
        "SingleHPUStrategy",
        "HPUParallelStrategy",  # devices="auto" takes every visible (emulated) device, as Lightning does for GPUs
        "IPUStrategy",
    ]
