"""Import optimum-habana runs: its ``gaudi_config.json`` and training arguments as the pieces of a Lightning run.

optimum-habana reached end of support with 1.21. :func:`import_optimum_habana` reads a ``GaudiConfig`` and
``GaudiTrainingArguments`` (dicts, JSON files, or the objects where optimum-habana is installed; it is never
imported) and returns an :class:`OptimumImport`; :class:`OptimumHabanaCLI` takes the same files on a LightningCLI
command line. Each field is mapped, refused with its reason, or ignored where it has no bearing on a Lightning run:
:data:`FIELDS` is that table, and ``docs/migration.md`` shows it.

Example:
    >>> from lightning_accel.habana.optimum import import_optimum_habana
    >>> run = import_optimum_habana("gaudi_config.json", "training_args.json")  # doctest: +SKIP
    >>> trainer = Trainer(**run.trainer_kwargs())  # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from lightning_accel.core.lazy import lazy_exports

from ._importer import OptimumImport, import_optimum_habana, read_fields
from ._table import FIELDS, Field, markdown_table

if TYPE_CHECKING:
    from .cli import OptimumHabanaCLI

__all__ = [
    "FIELDS",
    "Field",
    "OptimumHabanaCLI",
    "OptimumImport",
    "import_optimum_habana",
    "markdown_table",
    "read_fields",
]

# The CLI imports Lightning's CLI (and jsonargparse): loaded on first access only.
__getattr__, __dir__ = lazy_exports(__name__, {"OptimumHabanaCLI": ".cli"})
