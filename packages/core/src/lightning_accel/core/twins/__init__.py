"""Twins of vendor classes for the ``pytorch_lightning`` / ``lightning_fabric`` trees.

Lightning 2.6 ships its code twice (``lightning.pytorch`` and ``pytorch_lightning``) and each tree checks
``isinstance`` against its own base classes, so a vendor accelerator written against ``lightning.pytorch`` cannot
serve ``pytorch_lightning.Trainer``. Lightning itself produces ``pytorch_lightning`` by rewriting the imports of
``lightning.pytorch``; the core does the same, on demand, for vendor modules.

The twin of module ``lightning_accel.habana.accelerator`` is ``lightning_accel.core.twins.pytorch_lightning.
lightning_accel.habana.accelerator``: the same source, with ``lightning.pytorch`` imports read as ``pytorch_lightning``
and ``lightning.fabric`` as ``lightning_fabric``. Modules that do not depend on Lightning, directly or through
relative imports, are not copied: their twin *is* the original module, so emulator state is never duplicated.

Vendor code must therefore import Lightning as ``from lightning.pytorch... import ...`` (or ``import
lightning.pytorch as pl``) and its own package with relative imports. Twin modules keep the original file name and
line numbers, so tracebacks and ``inspect.getsource`` point at the real source; they pickle by their twin name,
which any process that has ``lightning-accel-core`` installed can import.

Example:
    >>> from lightning_accel.core.twins import twin_name
    >>> twin_name("lightning_accel.habana.accelerator")
    'lightning_accel.core.twins.pytorch_lightning.lightning_accel.habana.accelerator'
"""

from lightning_accel.core.twins._finder import TWIN_ROOT, install_finder, twin_name
from lightning_accel.core.twins._rewrite import depends_on_lightning, rewrite_imports

__all__ = ["TWIN_ROOT", "depends_on_lightning", "install_finder", "rewrite_imports", "twin_name"]

install_finder()
