"""Profile reports of compiled models, written when Poplar's auto-report is switched on.

Poplar reads ``POPLAR_ENGINE_OPTIONS`` (JSON) when a model is compiled; with ``"autoReport.all": "true"`` (or
``"autoReport.outputGraphProfile": "true"``) it writes a report per model to ``"autoReport.directory"`` (default:
the working directory), in a sub-directory named after the model (``Options.modelName``, default ``training`` or
``inference``). The emulator writes ``emulator_profile.json`` there instead of Poplar's ``profile.pop``; its format
(``"format": "lightning-accel/ipu-emulator-profile"``, version 1) is::

    {
      "format": "lightning-accel/ipu-emulator-profile", "version": 1,
      "model_name": "training", "executor": "training" | "inference",
      "options": {"device_iterations": 4, "replication_factor": 2, "gradient_accumulation": 1,
                  "output_mode": "Final", "output_return_period": 1, "reduction": "Mean"},
      "ipus_per_replica": 2, "replicas": 2, "ipus_reserved": 4,
      "execution": "pipelined" | "sharded", "pipeline_stages": 2,
      "inputs": [{"name": "x", "shape": [8, 5], "dtype": "torch.float32"}],       # one micro-batch
      "ipus": [{"ipu": 0, "parameters": ["layer1.weight", ...], "parameter_elements": 60,
                "parameter_bytes": 240, "operators": {"linear": 1, ...}, "operator_count": 3}, ...]
    }
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["ENGINE_OPTIONS_VAR", "report_directory", "write_report"]

ENGINE_OPTIONS_VAR = "POPLAR_ENGINE_OPTIONS"
REPORT_FILE = "emulator_profile.json"


def _is_on(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def report_directory(model_name: str) -> Path | None:
    """Where the report of ``model_name`` goes, or ``None`` when auto-report is off.

    Raises:
        ValueError: When ``POPLAR_ENGINE_OPTIONS`` is not a JSON object.
    """
    raw = os.environ.get(ENGINE_OPTIONS_VAR, "").strip()
    if not raw:
        return None
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{ENGINE_OPTIONS_VAR}={raw!r} is not valid JSON: {err}.") from err
    if not isinstance(options, dict):
        raise ValueError(f"{ENGINE_OPTIONS_VAR}={raw!r} must be a JSON object.")
    if not (_is_on(options.get("autoReport.all")) or _is_on(options.get("autoReport.outputGraphProfile"))):
        return None
    return Path(options.get("autoReport.directory", ".")) / model_name


def write_report(model_name: str, content: dict[str, Any]) -> Path | None:
    """Write ``content`` as the report of ``model_name`` if auto-report is on; return the file written."""
    directory = report_directory(model_name)
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPORT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"format": "lightning-accel/ipu-emulator-profile", "version": 1, **content}, indent=2))
    tmp.replace(path)
    return path
