"""A broken vendor stack never breaks Lightning: CPU training goes on, and asking for the device gives the SDK's reason.

Each case puts a stand-in SDK first on ``sys.path`` of a fresh process, with emulation off: a Habana SDK whose
``habana_frameworks.torch`` raises ``AssertionError`` when imported (what it does next to another torch than its
build) or ``OSError`` (a shared library missing), a half-installed one (``habana_frameworks`` without its ``torch``
package), and a poptorch that raises either. The process imports only Lightning, trains a step on the CPU, then asks
for the vendor's device.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

TORCH_MISMATCH = "AssertionError('habana_frameworks was built for torch 2.6.0, but torch 2.13.0 is installed')"
MISSING_LIBRARY = "OSError('libSynapse.so: cannot open shared object file: No such file or directory')"
POPLAR_MISSING = "OSError('libpoplar.so: cannot open shared object file: No such file or directory')"
POPTORCH_MISMATCH = "AssertionError('PopTorch is compatible with torch 2.0.1 only')"

# id: (files of the stand-in SDK {path: source}, device type, pieces the error must contain)
CASES = {
    "habana-torch-mismatch": (
        {"habana_frameworks/__init__.py": "", "habana_frameworks/torch/__init__.py": f"raise {TORCH_MISMATCH}"},
        "hpu",
        ["AssertionError: habana_frameworks was built for torch 2.6.0", "LIGHTNING_ACCEL_EMULATE=hpu"],
    ),
    "habana-missing-library": (
        {"habana_frameworks/__init__.py": "", "habana_frameworks/torch/__init__.py": f"raise {MISSING_LIBRARY}"},
        "hpu",
        ["OSError: libSynapse.so: cannot open shared object file", "LIGHTNING_ACCEL_EMULATE=hpu"],
    ),
    "habana-half-installed": (
        {"habana_frameworks/__init__.py": ""},
        "hpu",
        ["ModuleNotFoundError: No module named 'habana_frameworks.torch'", "LIGHTNING_ACCEL_EMULATE=hpu"],
    ),
    "poptorch-missing-library": (
        {"poptorch/__init__.py": f"raise {POPLAR_MISSING}"},
        "ipu",
        ["poptorch is installed but cannot be imported: OSError: libpoplar.so", "LIGHTNING_ACCEL_EMULATE=ipu"],
    ),
    "poptorch-torch-mismatch": (
        {"poptorch/__init__.py": f"raise {POPTORCH_MISMATCH}"},
        "ipu",
        ["AssertionError: PopTorch is compatible with torch 2.0.1 only", "LIGHTNING_ACCEL_EMULATE=ipu"],
    ),
}

SCRIPT = """
import json, sys
import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer = L.Trainer(accelerator="cpu", max_steps=1, **quiet)
trainer.fit(BoringModel())
result = {"cpu_steps": trainer.global_step}
device = sys.argv[1]
try:
    L.Trainer(accelerator=device, devices=1, **quiet)
except Exception as exc:
    result["trainer"] = [type(exc).__name__, str(exc)]
if device == "hpu":
    from lightning_accel.habana import HPUAccelerator

    result["is_available"] = HPUAccelerator.is_available()
    try:
        HPUAccelerator.parse_devices(1)
    except Exception as exc:
        result["accelerator"] = [type(exc).__name__, str(exc)]
print("RESULT" + json.dumps(result))
"""


@pytest.mark.parametrize("case_id", list(CASES))
def test_a_broken_sdk_leaves_lightning_working_and_gives_its_reason(  # type: ignore[no-untyped-def]
    run, tmp_path: Path, case_id: str
) -> None:
    files, device, pieces = CASES[case_id]
    for relative, source in files.items():
        path = tmp_path / "sdk" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source + "\n")
    done = run(
        ["-c", textwrap.dedent(SCRIPT), device],
        env={"PYTHONPATH": str(tmp_path / "sdk"), "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result["cpu_steps"] == 1
    error_type, message = result["trainer"]
    assert error_type in ("DeviceUnavailableError", "MisconfigurationException", "ConfigurationError"), message
    if device == "hpu":
        # Without Gaudi cards the Trainer says that first (with them, it loads the SDK and gives its reason); the
        # accelerator loads the SDK in any case and says why it cannot be used.
        assert result["is_available"] is False
        error_type, message = result["accelerator"]
        assert error_type == "ConfigurationError"
        assert "no HPU can be used in this process: the Habana SDK could not be loaded" in message
    else:
        assert "accelerator='ipu' cannot run here" in message
    for piece in pieces:
        assert piece in message, f"{piece!r} not in {message!r}"
