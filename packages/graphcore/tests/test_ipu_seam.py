"""``import poptorch`` is the emulator when emulation is asked for, even where poptorch is installed; otherwise the
installed poptorch (here a stand-in, ``standin_sdk/``); availability always describes what the seam hands out.

Each case runs in a fresh interpreter, as a user's script does: the import aliases are installed at start-up when
``LIGHTNING_ACCEL_EMULATE`` is set then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

STANDIN = Path(__file__).parent / "standin_sdk"

REPORT = """
import json, sys
from lightning_accel.graphcore import sdk
from lightning_accel.graphcore.availability import availability
import poptorch
import poptorch.optim
state = availability()
emulator = sys.modules.get("lightning_accel.poptorch_emulator")
print(json.dumps({
    "import_is_emulator": poptorch is emulator,
    "import_is_seam": poptorch is sdk.poptorch,
    "optim_is_emulator": poptorch.optim is getattr(emulator, "optim", None),
    "standin": getattr(poptorch, "STANDIN", False),
    "availability": [state.state, state.devices],
    "ipus": sdk.available_ipus(),
    "host": str(sdk.host_device()),
}))
"""


def _run(code: str, *, standin: bool, **env: str) -> Any:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LIGHTNING_ACCEL")}
    if standin:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STANDIN), environment.get("PYTHONPATH")]))
    environment.update(env)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_poptorch_is_the_emulator_when_emulation_is_on() -> None:
    report = _run(REPORT, standin=False, LIGHTNING_ACCEL_EMULATE="ipu")
    assert report["import_is_emulator"] and report["import_is_seam"] and report["optim_is_emulator"]
    assert report["availability"] == ["emulated", 8]
    assert (report["ipus"], report["host"]) == (8, "cpu")


def test_emulation_without_the_emulator_installed_names_the_extra() -> None:
    # lightning-accel-graphcore without its [emulator] extra: no distribution declares the name poptorch.
    code = """
    import json
    import _lightning_accel_sdk_aliases as aliases
    aliases._cache, aliases._read_entry_points = None, lambda tokens: {}
    from lightning.pytorch import Trainer
    from lightning_accel.graphcore import sdk
    from lightning_accel.graphcore.availability import availability
    state = availability()
    try:
        Trainer(accelerator="ipu", devices=1)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps([state.state, state.reason == sdk.EMULATOR_MISSING, error]))
    """
    state, same, error = _run(code, standin=False, LIGHTNING_ACCEL_EMULATE="ipu")
    assert (state, same) == ("unavailable", True)
    assert "pip install 'lightning-accel-graphcore[emulator]'" in error, error
    assert "lightning-accel-poptorch-emulator" in error, error


def test_an_explicit_emulation_request_wins_over_an_installed_poptorch() -> None:
    report = _run(REPORT, standin=True, LIGHTNING_ACCEL_EMULATE="ipu")
    assert report["import_is_emulator"] and report["import_is_seam"] and not report["standin"]
    assert report["availability"] == ["emulated", 8]
    assert report["ipus"] == 8


def test_with_emulation_off_the_installed_poptorch_is_used() -> None:
    report = _run(REPORT, standin=True, LIGHTNING_ACCEL_EMULATE="0")
    assert report["standin"] and report["import_is_seam"] and not report["import_is_emulator"]
    assert report["availability"] == ["hardware", 4]
    assert (report["ipus"], report["host"]) == (4, "cpu")


def test_without_poptorch_or_emulation_the_name_is_missing_and_the_seam_says_how_to_fix() -> None:
    code = """
    import json
    from lightning_accel.core.errors import DeviceUnavailableError
    from lightning_accel.graphcore import sdk
    from lightning_accel.graphcore.availability import availability
    try:
        import poptorch
        imported = True
    except ModuleNotFoundError:
        imported = False
    try:
        sdk.poptorch
        message = ""
    except DeviceUnavailableError as exc:
        message = str(exc)
    print(json.dumps([imported, message, availability().state]))
    """
    imported, message, state = _run(code, standin=False, LIGHTNING_ACCEL_EMULATE="0")
    assert imported is False
    assert "poptorch, which is not installed" in message and "LIGHTNING_ACCEL_EMULATE=ipu" in message
    assert state == "unavailable"


def test_emulation_switched_on_inside_the_process_reaches_import_poptorch() -> None:
    # As a notebook or a test's conftest does: the variable is set after start-up, the seam is asked first.
    code = """
    import json, os
    os.environ["LIGHTNING_ACCEL_EMULATE"] = "ipu"
    from lightning_accel.graphcore.sdk import poptorch as seam
    import poptorch
    print(json.dumps([poptorch is seam, seam.__name__]))
    """
    same, name = _run(code, standin=True)
    assert same and name == "lightning_accel.poptorch_emulator"


def test_the_seed_model_parallel_code_runs_unchanged() -> None:
    # Seed 004's annotations, as written there: `import poptorch`, then poptorch.BeginBlock / poptorch.Block.
    code = """
    import json
    import torch
    import poptorch

    class BlockModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = poptorch.BeginBlock(torch.nn.Linear(5, 10), ipu_id=0)
            self.layer2 = poptorch.BeginBlock(torch.nn.Linear(10, 5), ipu_id=1)

        def forward(self, x):
            with poptorch.Block(ipu_id=0):
                x = self.layer1(x)
            return self.layer2(x)

    opts = poptorch.Options().deviceIterations(4)
    model = poptorch.inferenceModel(BlockModel(), opts)
    print(json.dumps(list(model(torch.ones(8, 5)).shape)))
    model.destroy()
    """
    assert _run(code, standin=False, LIGHTNING_ACCEL_EMULATE="ipu") == [8, 5]
