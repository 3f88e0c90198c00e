"""The emulated SDK on the C++ device (issue 28): what loading it leaves of torch, and what the SDK's mode computes.

Each check runs in a fresh process, as loading the SDK cannot be undone.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from _emulator_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only

UNCHANGED_PROBE = r"""
import json, types
import torch

def snapshot():
    return {name: {k: id(v) for k, v in vars(obj).items()}
            for name, obj in (("torch", torch), ("Tensor", torch.Tensor), ("TensorBase", torch._C.TensorBase),
                              ("Generator", torch.Generator), ("Parameter", torch.nn.Parameter))}

before = snapshot()
import habana_frameworks.torch.core, habana_frameworks.torch.hpu  # the SDK's load (autoload off, or lazy mode)
torch.ones(2, device="hpu")
after = snapshot()
changed = {}
for name in before:
    keys = sorted(k for k in set(before[name]) | set(after[name]) if before[name].get(k) != after[name].get(k))
    if name == "torch":
        # Submodules that the load imported become attributes of their package, as any import does: no patch.
        keys = [k for k in keys if not (isinstance(getattr(torch, k, None), types.ModuleType)
                                        and getattr(torch, k).__name__ == f"torch.{k}" and k != "hpu")]
    if keys:
        changed[name] = keys
print("REPORT", json.dumps({"changed": changed, "hpu_is_sdk": torch.hpu is habana_frameworks.torch.hpu}))
"""

INT64_PROBE = r"""
import json
import habana_frameworks.torch.core
import torch
big = torch.tensor([2**31 - 1], device="hpu")
fine = torch.tensor([1.0], dtype=torch.float64, device="hpu")
print("REPORT", json.dumps({
    "int64": (big + 1).item(), "dtype": str((big + 1).dtype), "float64": (fine + 1e-12).item(),
}))
"""

_UNSET = ("PT_HPU_LAZY_MODE", "PT_HPU_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD", "PT_ENABLE_INT64_SUPPORT")


def _run(code: str, **variables: str) -> dict[str, Any]:
    env = {k: v for k, v in script_env().items() if k not in _UNSET}
    env.update(variables)
    done = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


@pytest.mark.parametrize(
    ("variables", "documented"),
    [
        # Eager mode, loaded at the first import (torch's autoload off): torch.manual_seed and torch.seed wrapped
        # (core/torch_overwrites.py:133-147, :489-497) and torch.hpu registered (core/__init__.py:46).
        ({"PT_HPU_AUTOLOAD": "0"}, ["hpu", "manual_seed", "seed"]),
        # Lazy mode adds the wrappers of torch.save and torch.load (core/torch_overwrites.py:389-432, :501-560).
        ({"PT_HPU_LAZY_MODE": "1"}, ["hpu", "load", "manual_seed", "save", "seed"]),
    ],
    ids=["eager", "lazy"],
)
def test_loading_changes_nothing_in_torch_beyond_the_sdks_load_effects(
    variables: dict[str, str], documented: list[str]
) -> None:
    report = _run(UNCHANGED_PROBE, **variables)
    assert report["hpu_is_sdk"] is True
    # torch.Tensor, its base, torch.Generator and nn.Parameter are untouched: no descriptor, no subclass.
    assert report["changed"] == {"torch": documented}


def test_int64_wraps_at_32_bits_in_lazy_mode_as_on_the_sdk() -> None:
    lazy = _run(INT64_PROBE, PT_HPU_LAZY_MODE="1")
    assert lazy == {"int64": -(2**31), "dtype": "torch.int64", "float64": 1.0}
    # PT_ENABLE_INT64_SUPPORT=1 keeps int64 exact in lazy mode; eager mode computes int64 exactly.
    assert _run(INT64_PROBE, PT_HPU_LAZY_MODE="1", PT_ENABLE_INT64_SUPPORT="1")["int64"] == 2**31
    eager = _run(INT64_PROBE)
    assert eager["int64"] == 2**31 and eager["float64"] == 1.0  # float64 is float32 precision in both modes
