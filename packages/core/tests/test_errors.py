"""Our configuration errors are Lightning's ``MisconfigurationException`` in both trees, from real Trainer calls."""

from __future__ import annotations

import lightning.fabric as lf
import lightning.pytorch as lp
import lightning_fabric
import pytest
import pytorch_lightning as pl
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning_fabric.utilities.exceptions import MisconfigurationException as PLMisconfigurationException

from lightning_accel.core import ConfigurationError, DeviceUnavailableError
from lightning_accel.core.errors import adopt_lightning_base


@pytest.mark.parametrize("trainer", [lp.Trainer, pl.Trainer], ids=["lightning.pytorch", "pytorch_lightning"])
@pytest.mark.parametrize("exception", [MisconfigurationException, PLMisconfigurationException], ids=["L", "PL"])
def test_bad_devices_from_a_real_trainer_call_is_a_misconfiguration(trainer: type, exception: type) -> None:
    with pytest.raises(exception, match=r"devices='two' is not accepted by testacc") as info:
        trainer(accelerator="testacc", devices="two", logger=False)
    assert isinstance(info.value, (ConfigurationError, ValueError))


@pytest.mark.parametrize("fabric", [lf.Fabric, lightning_fabric.Fabric], ids=["lightning.fabric", "lightning_fabric"])
def test_unavailable_device_matches_lightnings_exception_types(fabric: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTACC_UNAVAILABLE", "1")
    # The Trainer raises MisconfigurationException for an unavailable accelerator, Fabric a RuntimeError: ours is both.
    with pytest.raises(MisconfigurationException, match="TESTACC_UNAVAILABLE"):
        lp.Trainer(accelerator="testacc", devices=1, logger=False)
    with pytest.raises(RuntimeError, match="TESTACC_UNAVAILABLE") as info:
        fabric(accelerator="testacc", devices=1)
    assert isinstance(info.value, (DeviceUnavailableError, PLMisconfigurationException))


def test_adopting_a_base_is_idempotent_and_checked() -> None:
    before = ConfigurationError.__mro__
    adopt_lightning_base(MisconfigurationException)
    assert ConfigurationError.__mro__ == before
    with pytest.raises(TypeError, match=r"base=42 is not accepted"):
        adopt_lightning_base(42)  # type: ignore[arg-type]


ONLY_PYTORCH_LIGHTNING = """
import pytorch_lightning as pl
from pytorch_lightning.utilities.exceptions import MisconfigurationException
import sys
try:
    pl.Trainer(accelerator="testacc", devices="two", logger=False)
except MisconfigurationException as exc:
    print("CAUGHT", type(exc).__name__, "lightning.pytorch" in sys.modules)
"""


def test_a_script_with_only_pytorch_lightning_catches_it(python) -> None:  # type: ignore[no-untyped-def]
    process = python(ONLY_PYTORCH_LIGHTNING)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "CAUGHT ConfigurationError" in process.stdout
