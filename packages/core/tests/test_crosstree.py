"""Instances of a plugin's classes work with whichever Lightning tree receives them (both ways)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lightning_accel.core.crosstree import counterpart_class, flavour_of

# Every object reachable from a Trainer's strategy/accelerator must belong to the Trainer's tree: a leftover object
# of the other tree is a bug even when a short fit happens not to touch it.
LEAK_CHECK = """
from lightning_accel.core.crosstree import counterpart_class, flavour_of

def leaks(obj, flavour, seen=None, path="obj"):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    found = []
    origin = flavour_of(type(obj).__module__)
    if origin not in (None, flavour) and counterpart_class(type(obj), flavour) is not type(obj):
        found.append(f"{path}: {type(obj).__module__}.{type(obj).__qualname__}")
    if type(obj) in (list, tuple, set):
        for i, item in enumerate(obj):
            found += leaks(item, flavour, seen, f"{path}[{i}]")
    elif type(obj) is dict:
        for key, item in obj.items():
            found += leaks(item, flavour, seen, f"{path}[{key!r}]")
    elif origin is not None and hasattr(obj, "__dict__"):
        for key, item in vars(obj).items():
            found += leaks(item, flavour, seen, f"{path}.{key}")
    return found
"""

TRAINERS = (
    LEAK_CHECK
    + """
import json
import lightning.pytorch as L
import pytorch_lightning as pl
from lightning.pytorch.demos.boring_classes import BoringModel as LModel
from pytorch_lightning.demos.boring_classes import BoringModel as PLModel
from lightning.pytorch.plugins import TorchCheckpointIO
from lightning_accel_testplugin.accelerator import TestAccelerator
from lightning_accel_testplugin.precision import TestMixedPrecision
from lightning_accel_testplugin.strategies import TestSingleStrategy

out = {}
for name, module, model, flavour in (("pl", pl, PLModel, "pytorch_lightning"), ("L", L, LModel, "lightning")):
    precision = TestMixedPrecision()
    strategy = TestSingleStrategy(precision_plugin=precision, checkpoint_io=TorchCheckpointIO())
    trainer = module.Trainer(
        accelerator=TestAccelerator(), strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    before = leaks(trainer.strategy, flavour) + leaks(trainer.accelerator, flavour)
    trainer.fit(model())
    out[name] = {
        "accelerator": type(trainer.accelerator).__module__,
        "strategy": type(trainer.strategy).__module__,
        "precision": type(trainer.strategy.precision_plugin).__qualname__,
        "checkpoint_io": type(trainer.strategy.checkpoint_io).__module__,
        "leaks": before + leaks(trainer.strategy, flavour),
        "user_object_untouched": type(strategy).__module__,
        "step": trainer.global_step,
    }
# One object passed twice stays one object in the other tree.
shared = TestMixedPrecision()
trainer = pl.Trainer(
    accelerator="testacc", devices=1, strategy=TestSingleStrategy(precision_plugin=shared), logger=False
)
out["shared"] = trainer.strategy.precision_plugin is not shared and type(trainer.strategy.precision_plugin).__module__
print("RESULT" + json.dumps(out))
"""
)

FABRICS = (
    LEAK_CHECK
    + """
import json
import torch
import lightning.fabric as LF
import lightning_fabric
from lightning_accel_testplugin.fabric import TestFabricAccelerator, TestFabricSingleStrategy

out = {}
for name, module, flavour in (("lightning_fabric", lightning_fabric, "pytorch_lightning"), ("L", LF, "lightning")):
    fabric = module.Fabric(strategy=TestFabricSingleStrategy(accelerator=TestFabricAccelerator()), devices=1)
    model, optimizer = fabric.setup(torch.nn.Linear(4, 2), torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1))
    fabric.backward(model(torch.randn(3, 4)).sum())
    out[name] = [type(fabric.strategy).__module__, type(fabric.accelerator).__module__, leaks(fabric.strategy, flavour)]
print("RESULT" + json.dumps(out))
"""
)

TWIN = "lightning_accel.core.twins.pytorch_lightning.lightning_accel_testplugin"


def _result(process: Any) -> dict[str, Any]:
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULT"))
    result: dict[str, Any] = json.loads(line[len("RESULT") :])
    return result


def test_instances_fit_with_either_trainer(python) -> None:  # type: ignore[no-untyped-def]
    out = _result(python(TRAINERS))
    assert out["pl"] == {
        "accelerator": f"{TWIN}.accelerator",
        "strategy": f"{TWIN}.strategies",
        "precision": "TestMixedPrecision",
        "checkpoint_io": "lightning_fabric.plugins.io.torch_io",
        "leaks": [],
        "user_object_untouched": "lightning_accel_testplugin.strategies",
        "step": 2,
    }
    assert out["L"]["accelerator"] == "lightning_accel_testplugin.accelerator"
    assert out["L"]["leaks"] == [] and out["L"]["step"] == 2
    assert out["shared"] == f"{TWIN}.precision"


def test_instances_work_with_either_fabric(python) -> None:  # type: ignore[no-untyped-def]
    out = _result(python(FABRICS))
    assert out["lightning_fabric"] == [f"{TWIN}.fabric", f"{TWIN}.fabric", []]
    assert out["L"] == ["lightning_accel_testplugin.fabric", "lightning_accel_testplugin.fabric", []]


BACK = """
import lightning.pytorch as L
import pytorch_lightning as pl
first = pl.Trainer(accelerator="testacc", devices=1, precision="bf16-mixed", logger=False)
second = L.Trainer(accelerator=first.accelerator, devices=1, plugins=[first.strategy.precision_plugin], logger=False)
print("RESULT" + __import__("json").dumps([type(second.accelerator).__module__, type(second.strategy).__module__,
    type(first.strategy.precision_plugin).__module__, type(second.strategy.precision_plugin).__module__]))
"""


def test_twin_instances_go_back_to_the_lightning_tree(python) -> None:  # type: ignore[no-untyped-def]
    assert _result(python(BACK)) == [
        "lightning_accel_testplugin.accelerator",
        "lightning_accel_testplugin.strategies",
        f"{TWIN}.precision",
        "lightning_accel_testplugin.precision",
    ]


USER_SUBCLASS = """
import pytorch_lightning as pl
from lightning_accel_testplugin.accelerator import TestAccelerator

class MyAccelerator(TestAccelerator):
    pass

pl.Trainer(accelerator=MyAccelerator(), devices=1, logger=False)
"""


def test_a_user_subclass_of_the_other_tree_is_refused_with_the_fix(python) -> None:  # type: ignore[no-untyped-def]
    process = python(USER_SUBCLASS)
    assert process.returncode == 1
    assert "ConfigurationError: accelerator=<__main__.MyAccelerator" in process.stderr
    assert "derives from lightning_accel_testplugin.accelerator.TestAccelerator of the other" in process.stderr
    assert "`import lightning.pytorch` vs `import pytorch_lightning`" in process.stderr


def test_flavours_and_counterparts() -> None:
    import lightning.pytorch as L
    import pytorch_lightning as pl
    import torch
    from lightning_accel_testplugin.accelerator import TestAccelerator

    assert flavour_of("lightning.pytorch.strategies") == "lightning"
    assert flavour_of("lightning_fabric.plugins") == "pytorch_lightning"
    assert flavour_of("lightning_accel_testplugin.strategies") == "lightning"
    assert flavour_of(f"{TWIN}.strategies") == "pytorch_lightning"
    assert flavour_of("torch.nn") is None and flavour_of("lightning_accel.core.errors") is None
    assert counterpart_class(L.Trainer, "pytorch_lightning") is pl.Trainer
    assert counterpart_class(pl.Trainer, "lightning") is L.Trainer
    assert counterpart_class(torch.nn.Linear, "pytorch_lightning") is torch.nn.Linear
    twin = counterpart_class(TestAccelerator, "pytorch_lightning")
    assert twin.__module__ == f"{TWIN}.accelerator" and issubclass(twin, pl.accelerators.Accelerator)
    assert counterpart_class(twin, "lightning") is TestAccelerator


@pytest.mark.parametrize("value", ["testacc", None, 3])
def test_plain_values_pass_through(value: object) -> None:
    from lightning_accel.core.crosstree import to_tree

    assert to_tree(value, "pytorch_lightning", "accelerator", {}) is value
