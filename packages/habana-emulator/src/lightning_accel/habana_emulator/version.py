"""Emulation of ``habana_frameworks.torch.version``: the SDK release the emulator plays.

The SDK writes this module when its wheel is built (it is not in the bridge's repository); its ``__init__.py`` and
``hpu/__init__.py`` import ``__version__`` and ``version`` from it (bcc5172 ``__init__.py``, last statement;
``hpu/__init__.py:30-35``). The emulator plays gaudi-pytorch-bridge bcc5172, the SDK 1.24 period: both are
``"1.24.0"`` (a Gaudi wheel adds its build number, ``1.24.0.<build>``, which the emulator has none of).
"""

from __future__ import annotations

__all__ = ["__version__", "version"]

__version__ = "1.24.0"
version = __version__
