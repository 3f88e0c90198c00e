"""Passing optimum-habana's files to a LightningCLI run: ``--optimum.gaudi_config`` and ``--optimum.training_args``."""

from __future__ import annotations

import inspect
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from ._importer import OptimumImport, import_optimum_habana

__all__ = ["OptimumHabanaCLI"]


class OptimumHabanaCLI(LightningCLI):
    """A ``LightningCLI`` that also reads optimum-habana's ``gaudi_config.json`` and training arguments (JSON).

    The imported :meth:`~lightning_accel.habana.optimum.OptimumImport.trainer_kwargs` fill every Trainer argument the
    command line and config files leave at the Trainer's default; one given there wins. The imported callbacks are
    added to the configured ones. The import is kept as :attr:`optimum` (``None`` without the options), for the model
    to take its optimizer from (``cli.optimum.configure_optimizers(module)``).

    Example:
        >>> from lightning_accel.habana.optimum import OptimumHabanaCLI
        >>> cli = OptimumHabanaCLI(MyModel, MyData, args=[  # doctest: +SKIP
        ...     "fit", "--optimum.gaudi_config", "gaudi_config.json", "--optimum.training_args", "args.json"])
    """

    optimum: OptimumImport | None = None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Add ``--optimum.gaudi_config`` and ``--optimum.training_args`` (paths of JSON files)."""
        super().add_arguments_to_parser(parser)
        parser.add_argument("--optimum.gaudi_config", type=str | None, default=None, help="gaudi_config.json path")
        parser.add_argument(
            "--optimum.training_args", type=str | None, default=None, help="optimum-habana training arguments (JSON)"
        )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, with the imported arguments where the configuration leaves the Trainer's defaults."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        settings = config.get("optimum") or {}
        gaudi_config, training_args = settings.get("gaudi_config"), settings.get("training_args")
        if gaudi_config is None and training_args is None:
            return super().instantiate_trainer(**kwargs)
        self.optimum = import_optimum_habana(gaudi_config, training_args)
        configured = dict(config.get("trainer") or {})
        devices = configured.get("devices", "auto")
        imported = self.optimum.trainer_kwargs(devices=1 if devices == "auto" else devices)
        defaults = {
            name: p.default for name, p in inspect.signature(Trainer.__init__).parameters.items() if name != "self"
        }
        for name, value in imported.items():
            if name == "callbacks":
                continue
            if name in kwargs:
                continue
            if name not in configured or configured[name] == defaults.get(name):
                kwargs[name] = value
        # The imported callbacks join the configured ones (given to the Trainer together, so that its default
        # ModelCheckpoint is not added beside an imported one).
        initialized = self.config_init[self.subcommand] if self.subcommand else self.config_init
        configured_callbacks = (initialized.get("trainer") or {}).get("callbacks") or []
        if not isinstance(configured_callbacks, list):
            configured_callbacks = [configured_callbacks]
        kwargs.setdefault("callbacks", [*configured_callbacks, *imported["callbacks"]])
        return super().instantiate_trainer(**kwargs)
