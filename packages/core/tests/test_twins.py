"""The pytorch_lightning twins of vendor modules, in a fresh interpreter."""

from __future__ import annotations

import json

from lightning_accel.core.twins import rewrite_imports

TWINS = """
import importlib, inspect, json, pickle, sys
import pytorch_lightning as pl
import lightning_accel_testplugin
from lightning_accel.core.twins import twin_name
trainer = pl.Trainer(accelerator="testacc", devices=1, logger=False)
strategy = trainer.strategy
twin = sys.modules[twin_name("lightning_accel_testplugin.strategies")]
original = __import__("lightning_accel_testplugin.strategies", fromlist=["x"])
out = {
    "module": type(strategy).__module__,
    "is_pl_strategy": isinstance(strategy, pl.strategies.SingleDeviceStrategy),
    "copied": twin is not original,
    "plain_module_shared": importlib.import_module(twin_name("lightning_accel_testplugin.plugin"))
    is importlib.import_module("lightning_accel_testplugin.plugin"),
    "original_attribute_intact": lightning_accel_testplugin.strategies is original,
    "pickles": type(pickle.loads(pickle.dumps(trainer.accelerator))) is type(trainer.accelerator),
    "source": "class TestSingleStrategy" in inspect.getsource(type(strategy)),
    "file": twin.__file__ == original.__file__,
}
print("RESULT" + json.dumps(out))
"""


def test_twin_modules_are_copies_only_where_lightning_is_imported(python) -> None:  # type: ignore[no-untyped-def]
    process = python(TWINS)
    assert process.returncode == 0, process.stderr[-3000:]
    out = json.loads(next(line for line in process.stdout.splitlines() if line.startswith("RESULT"))[6:])
    assert out == {
        "module": "lightning_accel.core.twins.pytorch_lightning.lightning_accel_testplugin.strategies",
        "is_pl_strategy": True,
        "copied": True,
        "plain_module_shared": True,
        "original_attribute_intact": True,
        "pickles": True,
        "source": True,
        "file": True,
    }


def test_rewrite_touches_import_statements_only() -> None:
    source = (
        "import lightning.pytorch as pl\n"
        "from lightning.fabric.utilities import rank_zero_warn\n"
        "from lightning_accel.core.compat import TRIGGERS\n"
        'NAME = "lightning.pytorch"\n'
        "from .sibling import thing\n"
    )
    rewritten = rewrite_imports(source).splitlines()
    assert rewritten[0] == "import pytorch_lightning as pl"
    assert rewritten[1] == "from lightning_fabric.utilities import rank_zero_warn"
    assert (
        rewritten[2] == "from lightning_accel.core.twins.pytorch_lightning.lightning_accel.core.compat import TRIGGERS"
    )
    assert rewritten[3:] == ['NAME = "lightning.pytorch"', "from .sibling import thing"]
