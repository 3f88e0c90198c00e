"""Dynamo settings for one run, restored after it, with the recompile limit being hit reported.

optimum-habana's training arguments ``cache_size_limit``, ``inline_inbuilt_nn_modules`` and
``allow_unspec_int_on_nn_module`` set ``torch._dynamo.config`` for the whole process. :class:`DynamoSettings` sets
them for a run only (a ``Trainer`` callback, or a context manager around Fabric code) and puts the previous values back
after it. While it is active, a function that reaches the recompile limit (after which Dynamo runs it uncompiled for
the rest of the process) is reported with a warning naming the function and the limit, since a run that fell back
this way otherwise looks healthy.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from lightning_accel.core.errors import ConfigurationError

from ._run_setting import RunSetting

__all__ = ["DynamoSettings", "RecompileLimitWarning"]

# Dynamo's recompile-limit message ("torch._dynamo hit config.%s (%s)\n function: %s ...") is logged here.
_DYNAMO_LOGGER = "torch._dynamo.convert_frame"
_LIMIT_PREFIX = "torch._dynamo hit config."


class RecompileLimitWarning(UserWarning):
    """A function reached Dynamo's recompile limit: it runs uncompiled from then on."""


class _LimitHits(logging.Handler):
    """Turns Dynamo's recompile-limit log record into a warning naming the function and the limit."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.hits: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str) or not record.msg.startswith(_LIMIT_PREFIX):
            return
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) >= 4:
            limit = f"{args[0]}={args[1]}"
            function, reason = str(args[2]), str(args[3])
        else:  # another wording: keep Dynamo's whole message
            limit, function, reason = "recompile_limit", record.getMessage(), ""
        self.hits.append((function, limit, reason))
        warnings.warn(
            f"DynamoSettings: Dynamo reached its recompile limit ({limit}) for function {function}; it runs that "
            f"function uncompiled for the rest of the process. Last recompile reason: {reason or 'not given'}. "
            "Raise DynamoSettings(cache_size_limit=...) (optimum-habana's cache_size_limit), or keep the function's "
            "guards steady (for example HPUCompile(dynamic=True) for changing shapes).",
            RecompileLimitWarning,
            stacklevel=2,
        )


def _check(name: str, value: Any, kind: type, accepted: str) -> None:
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool)):
        raise ConfigurationError(f"DynamoSettings({name}={value!r}) is not accepted. Accepted: {accepted}.")


class DynamoSettings(RunSetting):
    """Set ``torch._dynamo.config`` for a run and restore it after; report functions that hit the recompile limit.

    The fields of optimum-habana's training arguments of the same names. ``None`` leaves a setting as it is.

    Args:
        cache_size_limit: How many compiled versions Dynamo keeps per function before it stops recompiling it and
            runs it uncompiled (``torch._dynamo.config.cache_size_limit``, called ``recompile_limit`` in newer
            torch). A positive int.
        inline_inbuilt_nn_modules: Whether Dynamo traces into ``torch.nn`` built-in modules
            (``torch._dynamo.config.inline_inbuilt_nn_modules``). Where torch has retired the setting (it always
            inlines), ``False`` is reported with a warning when the run starts, since it cannot take effect.
        allow_unspec_int_on_nn_module: Whether int attributes of modules are treated as dynamic rather than
            specialised (``torch._dynamo.config.allow_unspec_int_on_nn_module``).

    Raises:
        ConfigurationError: For a value of another type, a limit below 1, or no setting at all.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana.dynamo_settings import DynamoSettings
        >>> trainer = Trainer(accelerator="hpu", callbacks=[DynamoSettings(cache_size_limit=64)])  # doctest: +SKIP
        >>> with DynamoSettings(cache_size_limit=64):  # with Fabric, around the loop  # doctest: +SKIP
        ...     train(fabric, model, optimizer)
    """

    def __init__(
        self,
        cache_size_limit: int | None = None,
        inline_inbuilt_nn_modules: bool | None = None,
        allow_unspec_int_on_nn_module: bool | None = None,
    ) -> None:
        _check("cache_size_limit", cache_size_limit, int, "a positive int, or None to leave Dynamo's limit")
        if cache_size_limit is not None and cache_size_limit < 1:
            raise ConfigurationError(
                f"DynamoSettings(cache_size_limit={cache_size_limit!r}) is not accepted. Accepted: a positive int "
                "(Dynamo's default is 8), or None to leave Dynamo's limit."
            )
        _check("inline_inbuilt_nn_modules", inline_inbuilt_nn_modules, bool, "True, False or None")
        _check("allow_unspec_int_on_nn_module", allow_unspec_int_on_nn_module, bool, "True, False or None")
        self.settings: dict[str, Any] = {
            name: value
            for name, value in (
                ("cache_size_limit", cache_size_limit),
                ("inline_inbuilt_nn_modules", inline_inbuilt_nn_modules),
                ("allow_unspec_int_on_nn_module", allow_unspec_int_on_nn_module),
            )
            if value is not None
        }
        if not self.settings:
            raise ConfigurationError(
                "DynamoSettings() sets nothing. Give at least one of cache_size_limit, inline_inbuilt_nn_modules, "
                "allow_unspec_int_on_nn_module."
            )
        self._saved: dict[str, Any] | None = None
        self._hits = _LimitHits()

    @property
    def limit_hits(self) -> list[tuple[str, str, str]]:
        """The recompile-limit hits reported so far: ``(function, limit, last reason)``."""
        return list(self._hits.hits)

    def apply(self) -> None:
        """Set the settings and start reporting limit hits (what entering the context or a run's setup does)."""
        if self._saved is not None:
            return
        import torch
        import torch._dynamo.config as config

        retired = _retired(config, "inline_inbuilt_nn_modules")
        if self.settings.get("inline_inbuilt_nn_modules") is False and retired:
            warnings.warn(
                f"DynamoSettings(inline_inbuilt_nn_modules=False) cannot take effect with torch {torch.__version__}: "
                "this torch has retired the setting and always traces into torch.nn modules. Drop it, or use the "
                "torch version of your Gaudi software release, where it still applies.",
                UserWarning,
                stacklevel=2,
            )
        self._saved = {}
        with warnings.catch_warnings():
            # torch's own deprecation notice for a retired setting: the warning above says what it means here.
            warnings.simplefilter("ignore", FutureWarning)
            for name, value in self.settings.items():
                self._saved[name] = getattr(config, name)
                setattr(config, name, value)
        logging.getLogger(_DYNAMO_LOGGER).addHandler(self._hits)

    def restore(self) -> None:
        """Put the previous settings back and stop reporting (what leaving the context or a run's teardown does)."""
        if self._saved is None:
            return
        import torch._dynamo.config as config

        logging.getLogger(_DYNAMO_LOGGER).removeHandler(self._hits)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            for name, value in self._saved.items():
                setattr(config, name, value)
        self._saved = None


def _retired(config: Any, name: str) -> bool:
    entry = getattr(config, "_config", {}).get(name)
    return bool(getattr(entry, "deprecated", False))
