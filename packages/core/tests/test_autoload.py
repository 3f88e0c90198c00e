"""End to end in fresh interpreters whose scripts import only Lightning: the .pth hook does the rest."""

from __future__ import annotations

import json
import sys

SELECT = """
import json, sys
import lightning as L
import pytorch_lightning as pl
from lightning.pytorch.demos.boring_classes import BoringModel
quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
out = {}
trainer = L.Trainer(accelerator="testacc", max_steps=2, **quiet)
trainer.fit(BoringModel())
out["single"] = [type(trainer.accelerator).__name__, type(trainer.strategy).__name__, trainer.global_step]
trainer = L.Trainer(accelerator="testacc", devices=2, **quiet)
out["two_devices"] = type(trainer.strategy).__name__
trainer = L.Trainer(accelerator="testacc", num_nodes=2, **quiet)
out["two_nodes"] = type(trainer.strategy).__name__
trainer = L.Trainer(accelerator="testacc", strategy="testacc_ddp_find_unused_parameters_true", devices=2, **quiet)
out["named"] = [type(trainer.strategy).__name__, trainer.strategy._ddp_kwargs]
trainer = L.Trainer(accelerator="testacc", precision="bf16-mixed", **quiet)
out["precision"] = type(trainer.precision_plugin).__name__
out["fabric"] = type(L.Fabric(accelerator="testacc", devices=2).strategy).__name__
out["fabric_single"] = type(L.Fabric(accelerator="testacc").strategy).__name__
trainer = pl.Trainer(accelerator="testacc", max_steps=1, **quiet)
from pytorch_lightning.demos.boring_classes import BoringModel as PLBoringModel
trainer.fit(PLBoringModel())
out["pl"] = [type(trainer.strategy).__name__, isinstance(trainer.strategy, pl.strategies.Strategy)]
out["pl_two"] = type(pl.Trainer(accelerator="testacc", devices=2, **quiet).strategy).__name__
out["cpu"] = type(L.Trainer(accelerator="cpu", **quiet).strategy).__name__
out["auto"] = type(L.Trainer(**quiet).accelerator).__name__
out["auto_with_vendor_strategy"] = type(L.Trainer(strategy="testacc_single", **quiet).accelerator).__name__
out["modules"] = sorted(m for m in sys.modules if m.startswith("lightning_accel"))[:3]
print("RESULT" + json.dumps(out))
"""


def result_of(process) -> dict:  # type: ignore[no-untyped-def]
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def test_script_importing_only_lightning_gets_vendor_selection(python) -> None:  # type: ignore[no-untyped-def]
    out = result_of(python(SELECT))
    assert out["single"] == ["TestAccelerator", "TestSingleStrategy", 2]
    assert out["two_devices"] == "TestDDPStrategy"
    assert out["two_nodes"] == "TestDDPStrategy"
    assert out["named"] == ["TestDDPStrategy", {"find_unused_parameters": True}]
    assert out["precision"] == "TestMixedPrecision"
    assert out["fabric"] == "TestFabricDDPStrategy"
    assert out["fabric_single"] == "TestFabricSingleStrategy"
    assert out["pl"] == ["TestSingleStrategy", True]
    assert out["pl_two"] == "TestDDPStrategy"
    # Lightning's own choices are untouched, and "auto" never picks an emulated vendor...
    assert out["cpu"] == "SingleDeviceStrategy"
    assert out["auto"] == "CPUAccelerator"
    # ...unless the user named one of its strategies.
    assert out["auto_with_vendor_strategy"] == "TestAccelerator"


def test_opt_out_brings_back_lightnings_own_error(python) -> None:  # type: ignore[no-untyped-def]
    process = python("import lightning as L\nL.Trainer(accelerator='testacc')\n", env={"LIGHTNING_ACCEL_AUTOLOAD": "0"})
    assert process.returncode == 1
    assert "ValueError: You selected an invalid accelerator name: `accelerator='testacc'`" in process.stderr


def test_explicit_import_registers_without_site(python) -> None:  # type: ignore[no-untyped-def]
    # `python -S` skips .pth files; importing lightning-accel is the documented fallback.
    # The paths site would add (site-packages and editable installs' source folders), without running the .pth code.
    paths = [p for p in sys.path if p]
    code = f"""
import sys
sys.path[:0] = {paths!r}
import lightning as L
import lightning_accel.core
print("RESULT" + '{{"strategy": "' + type(L.Trainer(accelerator="testacc", logger=False).strategy).__name__ + '"}}')
"""
    assert result_of(python(code, args=("-S",)))["strategy"] == "TestSingleStrategy"


def test_disable_skips_plugin_by_name(python) -> None:  # type: ignore[no-untyped-def]
    process = python(
        "import lightning as L\nL.Trainer(accelerator='testacc')\n", env={"LIGHTNING_ACCEL_DISABLE": "testplugin"}
    )
    assert "invalid accelerator name: `accelerator='testacc'`" in process.stderr


def test_disable_with_a_name_no_plugin_has_warns_and_names_the_installed(python) -> None:  # type: ignore[no-untyped-def]
    process = python(
        "import lightning as L\nprint(type(L.Trainer(accelerator='testacc', logger=False).accelerator).__name__)\n",
        env={"LIGHTNING_ACCEL_DISABLE": "testplugn"},
    )
    assert process.returncode == 0, process.stderr
    assert "TestAccelerator" in process.stdout  # the typo disabled nothing
    assert (
        "lightning-accel: LIGHTNING_ACCEL_DISABLE='testplugn' names 'testplugn', which no "
        "installed plugin is called. Installed plugins:"
    ) in process.stderr
    assert "testplugin" in process.stderr.split("Installed plugins:")[1]


def test_unavailable_device_says_why(python) -> None:  # type: ignore[no-untyped-def]
    process = python("import lightning as L\nL.Trainer(accelerator='testacc')\n", env={"TESTACC_UNAVAILABLE": "1"})
    assert process.returncode == 1
    assert (
        "lightning_accel.core.errors.DeviceUnavailableError: accelerator='testacc' cannot run here: "
        "TESTACC_UNAVAILABLE=1 is set; unset it to use testacc. (plugin lightning-accel-testplugin 0.0.1)"
    ) in process.stderr


def test_ddp_fit_on_two_processes(python, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = """
import torch, lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel
class Model(BoringModel):
    def on_train_end(self):
        import torch.distributed as dist
        flat = torch.cat([p.detach().flatten() for p in self.parameters()])
        gathered = [torch.zeros_like(flat) for _ in range(2)]
        dist.all_gather(gathered, flat)
        if self.global_rank == 0:
            print("RESULT" + '{"same": %s, "world": %d, "strategy": "%s"}' % (
                str(torch.equal(gathered[0], gathered[1])).lower(), dist.get_world_size(),
                type(self.trainer.strategy).__name__))
trainer = L.Trainer(accelerator="testacc", devices=2, max_steps=3, logger=False, enable_progress_bar=False,
                    enable_checkpointing=False, enable_model_summary=False)
trainer.fit(Model())
# The result is out: leave without the interpreter's teardown and without destroy_process_group. On torch 2.0
# (the IPU stack) gloo hung a rank in either of them (seen twice: once in the teardown, once with destroy_process_group
# before it; both ranks had reported, and the run waited out its 300 s), and with the group alive at teardown gloo's
# threads can abort the interpreter ("terminate called without an active exception"). os._exit runs neither.
import os, sys
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""
    out = result_of(python(code))
    assert out == {"same": True, "world": 2, "strategy": "TestDDPStrategy"}


def test_lightning_cli_accepts_vendor_strings(python) -> None:  # type: ignore[no-untyped-def]
    code = """
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel, BoringDataModule
args = ["--trainer.accelerator", "testacc", "--trainer.strategy", "testacc_single", "--trainer.logger", "false"]
cli = LightningCLI(BoringModel, BoringDataModule, run=False, args=args)
print("RESULT" + '{"strategy": "%s", "accelerator": "%s"}' % (
    type(cli.trainer.strategy).__name__, type(cli.trainer.accelerator).__name__))
"""
    out = result_of(python(code, args=()))
    assert out == {"strategy": "TestSingleStrategy", "accelerator": "TestAccelerator"}


def test_broken_plugin_only_warns(python, tmp_path) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "fake_site"
    dist_info = site / "broken_vendor-1.2.3.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-vendor\nVersion: 1.2.3\n")
    (dist_info / "entry_points.txt").write_text("[lightning_accel.plugins]\nbroken = broken_vendor_missing:PLUGIN\n")
    process = python(
        "import lightning as L\nprint('RESULT{\"strategy\": \"%s\"}' % type(L.Trainer(accelerator='testacc', "
        "logger=False).strategy).__name__)\n",
        env={"PYTHONPATH": str(site)},
    )
    assert result_of(process) == {"strategy": "TestSingleStrategy"}
    assert "skipping plugin 'broken' of distribution 'broken-vendor' 1.2.3" in process.stderr
    assert "ModuleNotFoundError: No module named 'broken_vendor_missing'" in process.stderr


def test_auto_accelerator_follows_a_strategy_only_plugin(python, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A second distribution that registers only a strategy, declared to run on the test plugin's accelerator.
    site = tmp_path / "extra_site"
    package = site / "strategy_only_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from lightning_accel.core import Availability, PluginSpec, StrategySpec\n"
        "def availability():\n    return Availability('emulated', 'always')\n"
        "PLUGIN = PluginSpec(name='strategyonly', distribution='strategy-only', accelerators=(),\n"
        "    strategies=(StrategySpec('testacc_special', 'lightning_accel_testplugin.strategies:TestSingleStrategy',\n"
        "        accelerator='testacc'),), availability='strategy_only_plugin:availability')\n"
    )
    dist_info = site / "strategy_only-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: strategy-only\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        "[lightning_accel.plugins]\nstrategyonly = strategy_only_plugin:PLUGIN\n"
    )
    code = (
        "import lightning as L\n"
        "t = L.Trainer(strategy='testacc_special', logger=False)\n"
        'print(\'RESULT{"accelerator": "%s"}\' % type(t.accelerator).__name__)\n'
    )
    assert result_of(python(code, env={"PYTHONPATH": str(site)})) == {"accelerator": "TestAccelerator"}
