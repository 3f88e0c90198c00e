"""Selection details that need no fresh interpreter."""

from __future__ import annotations

import sys
import types

import lightning
import lightning.pytorch as pl_tree  # noqa: F401  (the tree must be imported for registration)
import pytest
from lightning.pytorch import Trainer
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
from packaging.version import Version

import lightning_accel.core  # noqa: F401
from lightning_accel.core.compat import TRIGGERS, Tree, check_lightning_version
from lightning_accel.core.errors import ConfigurationError, UnsupportedLightningError
from lightning_accel.core.selection import install_selection, is_wrapped


def test_wrap_is_installed_and_idempotent() -> None:
    tree = TRIGGERS["lightning.pytorch"]
    assert is_wrapped(tree)
    before = _AcceleratorConnector.__dict__["_choose_strategy"].__lightning_accel_original__
    install_selection(tree)
    install_selection(tree)
    after = _AcceleratorConnector.__dict__["_choose_strategy"]
    # Re-installing wraps Lightning's original again, never the wrap.
    assert after.__lightning_accel_original__ is before
    # The original is Lightning's own code: 2.6 refuses "hpu" itself; 2.3 to 2.5 imported lightning-habana for it.
    marker = "HPU is currently not supported. Please contact developer@lightning.ai"
    assert (marker if Version(lightning.__version__) >= Version("2.6") else "hpu") in before.__code__.co_consts


def test_static_auto_accelerator_still_callable_on_the_class() -> None:
    assert _AcceleratorConnector._choose_auto_accelerator() == "cpu"


@pytest.mark.skipif(
    "ipu" in __import__("lightning.pytorch.accelerators").pytorch.accelerators.AcceleratorRegistry,
    reason="lightning-accel-graphcore is installed here (the core_tests session installs only the core)",
)
def test_missing_sibling_distribution_names_the_extra() -> None:
    with pytest.raises(ConfigurationError) as error:
        Trainer(accelerator="ipu", logger=False)
    message = str(error.value)
    assert message.startswith(
        "accelerator='ipu' is provided by lightning-accel-graphcore, which is not active: install it with "
        "`pip install 'lightning-accel[graphcore]'`. Installed accelerator names: auto, "
    )
    assert "testacc" in message


@pytest.mark.skipif(
    "hpu_deepspeed" in __import__("lightning.pytorch.strategies").pytorch.strategies.StrategyRegistry,
    reason="lightning-accel-deepspeed-hpu is installed here (the core_tests session installs only the core)",
)
def test_missing_strategy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ConfigurationError, match=r"strategy='hpu_deepspeed_stage_9' is provided by lightning-accel-deepspeed-hpu"
    ):
        Trainer(strategy="hpu_deepspeed_stage_9", logger=False)


def test_unknown_names_keep_lightnings_error() -> None:
    with pytest.raises(ValueError, match="You selected an invalid accelerator name: `accelerator='xpu9'`"):
        Trainer(accelerator="xpu9", logger=False)


def test_version_guard_refuses_untested_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("fake_lightning_tree")
    fake.__version__ = "2.7.1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_lightning_tree", fake)
    tree = Tree("fake_lightning_tree", "pytorch", "lightning", "lightning")
    with pytest.raises(UnsupportedLightningError) as error:
        check_lightning_version(tree)
    assert str(error.value) == (
        "lightning-accel supports lightning >=2.3.0,<2.7.0, but 2.7.1 is installed (tree 'fake_lightning_tree'). "
        "Install a supported version, e.g. `pip install 'lightning>=2.3.0,<2.7.0'`, or upgrade lightning-accel-core."
    )
    check_lightning_version(TRIGGERS["lightning.pytorch"])  # the installed one passes


@pytest.mark.parametrize("devices", [0, "0", []])
def test_no_devices_for_a_vendor_accelerator_says_what_is_accepted(devices: object) -> None:
    with pytest.raises(ConfigurationError) as error:
        Trainer(accelerator="testacc", devices=devices, logger=False)  # type: ignore[arg-type]
    assert str(error.value) == (
        f"Trainer(devices={devices!r}) is not accepted with accelerator='testacc': it needs at least one TESTACC. "
        "Accepted: a positive int (e.g. devices=1), -1 for every visible TESTACC, or 'auto'. To run on the CPU "
        "instead, pass accelerator='cpu'."
    )


def test_no_devices_for_lightnings_own_accelerators_keeps_lightnings_error() -> None:
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match=r"`Trainer\(devices=0\)` value is not a valid input using cpu"):
        Trainer(accelerator="cpu", devices=0, logger=False)
