"""Emulation of ``habana_frameworks.torch.hpu.metrics.saver``: writing metric statistics to JSON or text files.

The SDK's module is plain Python (gaudi-pytorch-bridge bcc5172, ``python_packages/habana_frameworks/torch/hpu/metrics/
saver.py``); this is the same logic with the same file formats, names and environment variables
(``PT_HPU_METRICS_FILE``, ``PT_HPU_METRICS_FILE_FORMAT`` and their ``HABANA_PT_`` spellings). Since 1.19 the SDK
dumps on two triggers only, the process's exit and the user's ``metrics_dump``: ``PT_HPU_METRICS_DUMP_TRIGGERS`` is
no longer read, and a saver made from the environment dumps at exit. As on the SDK, a file name without a directory
part (``"metrics.json"``) fails in ``os.makedirs("")``: pass ``"./metrics.json"``.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import IO, Any, ClassVar

__all__ = [
    "MetricDumpFormat",
    "MetricDumpTrigger",
    "MetricJsonWriter",
    "MetricNullWriter",
    "MetricSaver",
    "MetricTextWriter",
    "MetricWriter",
]


def _pairs(stats: Sequence[tuple[str, Any]] | Mapping[str, Any]) -> Sequence[tuple[str, Any]]:
    return list(stats.items()) if isinstance(stats, Mapping) else stats


class MetricWriter(metaclass=abc.ABCMeta):
    """A file that receives metric statistics; a taken name gets ``.1``, ``.2`` ... appended (``saver.py:28-52``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        os.makedirs(os.path.dirname(self._name), exist_ok=True)
        self._handle: IO[str] | None = self._create_unique_file()

    def _create_unique_file(self) -> IO[str]:
        candidate, index = self._name, 0
        while True:
            try:
                handle = open(candidate, "x")
            except FileExistsError:
                index += 1
                candidate = f"{self._name}.{index}"
                continue
            self._name = candidate
            return handle

    @abc.abstractmethod
    def write(
        self, name: str, stats: Sequence[tuple[str, Any]] | Mapping[str, Any], dump_trigger: str, timestamp: Any
    ) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def close(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:
        # At interpreter exit this module's globals may already be gone; the file is closed by then anyway.
        try:
            self.close()
        except Exception:
            pass


class MetricJsonWriter(MetricWriter):
    """Writes a JSON array of ``{"metric_name", "triggered_by", "generated_on", "statistics"}`` objects."""

    class MetricJsonEncoder(json.JSONEncoder):
        """Writes ``datetime`` values in ISO format."""

        def default(self, obj: Any) -> Any:
            if isinstance(obj, datetime):
                return obj.isoformat()
            return super().default(obj)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        assert self._handle is not None
        self._handle.write("[")
        self._handle.flush()
        self._first_obj_written = False

    def write(
        self, name: str, stats: Sequence[tuple[str, Any]] | Mapping[str, Any], dump_trigger: str, timestamp: Any
    ) -> None:
        """Append one metric's statistics to the array (``saver.py:96-112``)."""
        assert self._handle is not None
        obj_to_write = {
            "metric_name": name,
            "triggered_by": dump_trigger,
            "generated_on": timestamp,
            "statistics": dict(stats),
        }
        if self._first_obj_written:
            self._handle.write(",\n")
        self._handle.write(json.dumps(obj_to_write, cls=self.MetricJsonEncoder))
        self._handle.flush()
        self._first_obj_written = True

    def close(self) -> None:
        """Close the root array and the file."""
        if getattr(self, "_handle", None):
            assert self._handle is not None
            self._handle.write("]\n")
            self._handle.flush()
            self._handle.close()
            self._handle = None


class MetricTextWriter(MetricWriter):
    """Writes metric statistics as text blocks (``Metric name:``, ``Triggered by:``, ``Statistics:`` ...)."""

    def write(
        self, name: str, stats: Sequence[tuple[str, Any]] | Mapping[str, Any], dump_trigger: str, timestamp: Any
    ) -> None:
        """Append one metric's block (``saver.py:131-143``)."""
        assert self._handle is not None
        lines_to_write = [
            f"Metric name: {name}\n",
            f"Triggered by: {dump_trigger}\n",
            f"Generated on: {timestamp}\n",
            "Statistics:\n",
            # device_memory's statistics are a dict, which the SDK's writer would unpack as pairs and fail on.
            *[f"\t{stat_name}: {stat_value}\n" for stat_name, stat_value in _pairs(stats)],
            "\n",
        ]
        self._handle.writelines(lines_to_write)
        self._handle.flush()

    def close(self) -> None:
        """Close the file."""
        if getattr(self, "_handle", None):
            assert self._handle is not None
            self._handle.close()
            self._handle = None


class MetricNullWriter(MetricWriter):
    """Writes nothing (the saver's writer while no file is configured)."""

    def __init__(self, name: str = "") -> None:
        pass

    def write(
        self, name: str, stats: Sequence[tuple[str, Any]] | Mapping[str, Any], dump_trigger: str, timestamp: Any
    ) -> None:
        pass

    def close(self) -> None:
        pass


class MetricDumpFormat(str, Enum):
    """The file formats of a metrics dump."""

    json = "json"
    text = "text"


class MetricDumpTrigger(str, Enum):
    """The events that write a dump."""

    process_exit = "process_exit"
    user = "user"


class MetricSaver:
    """Writes metrics to a file on the configured triggers (the SDK's ``saver.py:170-280``)."""

    METRIC_FILE_ENV_VAR = "PT_HPU_METRICS_FILE"
    METRIC_FILE_ENV_VAR_ALT = "HABANA_PT_METRICS_FILE"

    METRIC_FILE_FORMAT_ENV_VAR = "PT_HPU_METRICS_FILE_FORMAT"
    METRIC_FILE_FORMAT_ENV_VAR_ALT = "HABANA_PT_METRICS_FILE_FORMAT"
    METRIC_FILE_FORMAT_DEFAULT = MetricDumpFormat.json

    METRIC_DUMP_TRIGGER_DEFAULT = ",".join([MetricDumpTrigger.process_exit])

    FORMAT_TO_WRITER_MAP: ClassVar[dict[MetricDumpFormat, type[MetricWriter]]] = {
        MetricDumpFormat.json: MetricJsonWriter,
        MetricDumpFormat.text: MetricTextWriter,
    }

    def __init__(
        self,
        file_name: str = "",
        triggers: Sequence[MetricDumpTrigger] | None = None,
        format: MetricDumpFormat = METRIC_FILE_FORMAT_DEFAULT,
    ) -> None:
        if triggers is None:
            triggers = [MetricDumpTrigger.user]
        use_env = not file_name
        self._metric_file_base_name = file_name or self._get_env(self.METRIC_FILE_ENV_VAR, self.METRIC_FILE_ENV_VAR_ALT)
        self._saver_enabled = bool(self._metric_file_base_name)
        self._metric_dump_triggers: list[MetricDumpTrigger] = []
        self._metric_writer: MetricWriter = MetricNullWriter()
        self._metric_file_format = format
        if self._saver_enabled:
            self._metric_dump_triggers = self._get_metric_dump_trigger_from_env() if use_env else list(triggers)
            self._metric_file_format = self._get_metric_dump_format_from_env() if use_env else format
        self._saver_activated = False

    def _get_env(self, env_name: str, alt_env_name: str | None = None, default_value: Any = None) -> Any:
        if env_name in os.environ:
            return os.environ[env_name]
        if alt_env_name:
            return os.environ.get(alt_env_name, default_value)
        return default_value

    def _get_metric_dump_trigger_from_env(self) -> list[MetricDumpTrigger]:
        # The name is the SDK's; since 1.19 no variable chooses the triggers, the default (process exit) is used.
        return [MetricDumpTrigger[trigger] for trigger in self.METRIC_DUMP_TRIGGER_DEFAULT.split(",")]

    def _get_metric_dump_format_from_env(self) -> MetricDumpFormat:
        metric_file_format = self._get_env(
            self.METRIC_FILE_FORMAT_ENV_VAR, self.METRIC_FILE_FORMAT_ENV_VAR_ALT, self.METRIC_FILE_FORMAT_DEFAULT
        )
        if isinstance(metric_file_format, MetricDumpFormat):
            return metric_file_format
        return MetricDumpFormat[metric_file_format]

    def _determine_file_name_for_multinode(self, name: str) -> str:
        try:
            base_name, ext = name.rsplit(".", maxsplit=1)
            ext = f".{ext}"
        except ValueError:
            base_name, ext = name, ""
        for env_var in ("RANK", "OMPI_COMM_WORLD_RANK"):
            if env_var in os.environ:
                return f"{base_name}-rank{os.environ[env_var]}{ext}"
        return f"{base_name}{ext}"

    def _get_metric_writer(self) -> MetricWriter:
        if isinstance(self._metric_writer, MetricNullWriter) and self._saver_enabled and self._saver_activated:
            metric_file_name = self._determine_file_name_for_multinode(self._metric_file_base_name)
            self._metric_writer = MetricSaver.FORMAT_TO_WRITER_MAP[self._metric_file_format](metric_file_name)
        return self._metric_writer

    @property
    def metric_change_callback(self) -> Callable[[Any, str, Sequence[tuple[str, Any]]], None]:
        """The callback the manager hands each global metric (``on_metric_change``); no metric calls it any more.

        The 1.19 SDK wrote a dump on each change when ``metric_change`` was a trigger. That trigger is gone (metrics
        collect their events when read), and the SDK's callback still names it, so calling it fails there with an
        ``AttributeError``; the emulator's says why.
        """

        def callback(timestamp: Any, metric_name: str, stats: Sequence[tuple[str, Any]]) -> None:
            raise AttributeError(
                f"MetricSaver.metric_change_callback was called for {metric_name!r}, but this SDK has no "
                "'metric_change' dump trigger (MetricDumpTrigger has only process_exit and user); dump with "
                "metrics_dump() instead."
            )

        return callback

    def enable(self) -> None:
        """Allow writing (the SDK enables its global saver when a device is acquired)."""
        self._saver_activated = True

    def process_trigger(self, trigger: MetricDumpTrigger, metrics: Sequence[Any] | None = None) -> None:
        """Write each metric's statistics if ``trigger`` is one of this saver's triggers (no metrics: nothing to do)."""
        if metrics is not None and trigger in self._metric_dump_triggers:
            for metric in metrics:
                self._get_metric_writer().write(metric.name(), metric.stats(), trigger, timestamp=datetime.now())

    def close(self) -> None:
        """Close the file."""
        self._metric_writer.close()
        self._metric_writer = MetricNullWriter()

    def __del__(self) -> None:
        # At interpreter exit this module's globals may already be gone; the file is closed by then anyway.
        try:
            self.close()
        except Exception:
            pass
