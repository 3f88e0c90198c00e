"""Exceptions raised by lightning-accel for bad input.

Every error names the argument or variable, the value it got, what is accepted and how to fix it. They subclass
``ValueError`` so that code catching Lightning's own configuration errors (which are ``ValueError`` or
``MisconfigurationException``, itself an ``Exception``) keeps working.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "DeviceUnavailableError", "UnsupportedLightningError"]


class ConfigurationError(ValueError):
    """A setting, argument or environment variable has a value that is not accepted."""


class DeviceUnavailableError(RuntimeError):
    """A vendor device was requested but neither its hardware nor its emulator can be used."""


class UnsupportedLightningError(RuntimeError):
    """The installed Lightning is outside the range lightning-accel was tested with."""
