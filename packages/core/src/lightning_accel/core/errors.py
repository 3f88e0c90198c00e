"""Exceptions raised by lightning-accel for bad input.

Every error names the argument or variable, the value it got, what is accepted and how to fix it.

They follow Lightning's conventions for the same mistakes, so code (and tests) written for Lightning keep catching
them: :class:`ConfigurationError` is a ``ValueError`` *and* Lightning's ``MisconfigurationException``;
:class:`DeviceUnavailableError` is a ``RuntimeError`` (what Fabric raises for an unavailable accelerator) *and* a
``MisconfigurationException`` (what the Trainer raises). Lightning 2.6 has two ``MisconfigurationException`` classes,
one per tree (``lightning.fabric.utilities.exceptions`` and ``lightning_fabric.utilities.exceptions``; the
``*.pytorch.utilities.exceptions`` names are the same objects). Importing a tree must not be a side effect of
importing this module (``pytorch_lightning`` costs seconds), so the errors adopt each tree's class as a base when the
core registers into that tree (:func:`adopt_lightning_base`). Nobody can catch a class of a tree that was never
imported, and the core registers into every tree as it is imported, so every ``except MisconfigurationException``
that can run sees our errors as subclasses.

Example:
    >>> import lightning.pytorch  # the core registers into the tree, and the errors adopt its base
    >>> from lightning.pytorch.utilities.exceptions import MisconfigurationException
    >>> issubclass(ConfigurationError, (ValueError, MisconfigurationException))
    True
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "DeviceUnavailableError", "UnsupportedLightningError", "adopt_lightning_base"]


class ConfigurationError(ValueError):
    """A setting, argument or environment variable has a value that is not accepted.

    Also a ``MisconfigurationException`` of every imported Lightning tree (see the module docstring).

    Example:
        >>> try:
        ...     raise ConfigurationError("devices=3 is not accepted: IPUs come in powers of two. Use devices=2.")
        ... except ValueError as exc:
        ...     print(exc)
        devices=3 is not accepted: IPUs come in powers of two. Use devices=2.
    """


class DeviceUnavailableError(RuntimeError):
    """A vendor device was requested but neither its hardware nor its emulator can be used.

    Also a ``MisconfigurationException`` of every imported Lightning tree, like the Trainer's own error for an
    accelerator that is not available.
    """


class UnsupportedLightningError(RuntimeError):
    """The installed Lightning is outside the range lightning-accel was tested with."""


# The errors that Lightning reports as MisconfigurationException for the same mistake.
_MISCONFIGURATIONS: tuple[type[Exception], ...] = (ConfigurationError, DeviceUnavailableError)


def adopt_lightning_base(base: type[Exception]) -> None:
    """Make our configuration errors (and their subclasses) subclasses of ``base`` too.

    ``except`` clauses check real inheritance (``__subclasscheck__`` is never consulted), so the base is added to
    ``__bases__``: both classes derive from ``Exception`` with the same layout, which Python allows. Idempotent.

    Args:
        base: A tree's ``MisconfigurationException``.

    Raises:
        TypeError: When ``base`` is not an exception class.
    """
    if not (isinstance(base, type) and issubclass(base, Exception)):
        raise TypeError(f"base={base!r} is not accepted: pass an exception class such as MisconfigurationException.")
    for error in _MISCONFIGURATIONS:
        if not issubclass(error, base):
            error.__bases__ = (*error.__bases__, base)
