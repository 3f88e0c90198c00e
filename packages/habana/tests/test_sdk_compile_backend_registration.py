"""``hpu_backend`` is registered once, by the SDK, in every order of loading the SDK and looking the name up.

The SDK registers ``hpu_backend`` with ``@register_backend`` whenever it loads (gaudi-pytorch-bridge 1.19.0
``core/__init__.py:55``, ``dynamo/compile_backend/backends.py:47``) and torch refuses a second registration
(``AssertionError: duplicate name``). lightning-accel-habana's ``torch_dynamo_backends`` entry point must therefore
never put a function of its own under the name first (issue 22, item 4).
"""

from __future__ import annotations

import subprocess

import pytest
from _habana_helpers import PYTHON, script_env

PROBE = r"""
import sys
import torch
from torch._dynamo.backends.registry import _COMPILER_FNS, list_backends, lookup_backend

order = sys.argv[1]
assert "hpu_backend" in list_backends()  # listed right after `import torch`, whatever the mode
if order == "lookup first":
    found = lookup_backend("hpu_backend")
import habana_frameworks.torch  # the SDK's load (a no-op where `import torch` loaded it)
import habana_frameworks.torch.dynamo.compile_backend  # and the SDK's compile backend, explicitly
import habana_frameworks.torch.dynamo.compile_backend.backends as backends
if order == "sdk first":
    found = lookup_backend("hpu_backend")
assert found is backends.hpu_backend is _COMPILER_FNS["hpu_backend"], (found, _COMPILER_FNS["hpu_backend"])
print("ONE REGISTRATION:", found.__module__)
"""

ORDERS = [
    pytest.param("sdk first", {}, id="eager: the SDK at import torch, then the lookup"),
    pytest.param("lookup first", {"PT_HPU_AUTOLOAD": "0"}, id="PT_HPU_AUTOLOAD=0: lookup, then the SDK"),
    pytest.param("lookup first", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, id="TORCH_DEVICE_BACKEND_AUTOLOAD=0"),
    pytest.param("lookup first", {"PT_HPU_LAZY_MODE": "1"}, id="lazy mode: lookup, then the SDK"),
]


@pytest.mark.parametrize(("order", "variables"), ORDERS)
def test_hpu_backend_is_registered_once_by_the_sdk(order: str, variables: dict[str, str]) -> None:
    unset = ("PT_HPU_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD", "PT_HPU_LAZY_MODE")
    env = {k: v for k, v in script_env().items() if k not in unset}
    env.update(variables)
    done = subprocess.run([PYTHON, "-c", PROBE, order], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ONE REGISTRATION: " in done.stdout
