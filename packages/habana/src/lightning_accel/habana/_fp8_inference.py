"""fp8 inference through Intel Neural Compressor (INC): the precision plugins' ``convert_modules(inference=True)``.

What lightning-habana 1.7 offered (``pytorch/plugins/precision.py``, ``_setup_fp8_inference_config`` and
``_setup_fp8_inference_modules``; ``strategies/single.py``, ``on_test_end``/``on_predict_end``), on INC's
``neural_compressor.torch.quantization`` API (``FP8Config``, ``prepare``, ``convert``, ``finalize_calibration``):

- ``quant=False`` measures: INC's ``prepare`` inserts observers that record each quantizable layer's absolute maxima
  while ``trainer.test``/``predict`` runs; when the run ends, ``finalize_calibration`` writes them to
  ``<fp8_data_path>/inc_output/measure_hooks_maxabs.{json,npz}`` (and ``..._mod_list.json``);
- ``quant=True`` quantizes: INC's ``convert`` reads those measurements, computes a scale per tensor and swaps each
  layer for one that casts its input and weight to fp8 (``torch.ops.hpu.cast_to_fp8_v2``) and multiplies them with
  ``torch.ops.hpu.fp8_gemm_v2``; the following ``trainer.test``/``predict`` runs in fp8;
- ``quant`` may also name an INC fp8 JSON config, or be a dict of one (``"mode": "MEASURE"`` or ``"QUANTIZE"``,
  ``observer``, ``scale_method``, ``allowlist``, ``blocklist``, ...); ``True`` and ``False`` are the packaged
  ``quant_config/fp8/maxabs_quant.json`` and ``maxabs_measure.json`` (lightning-habana's two files);
- several processes (DDP ``trainer.predict``/``test``): once the process group exists, INC names each rank's files
  ``measure_hooks_maxabs_<rank>_<world size>.*`` (``_quant_common/quant_config.py``, from ``torch.distributed``), so
  each rank measures its share of the data into its own files and quantizes from them, as INC's multi-card runs on
  Gaudi do. A module converted before the processes existed has file names for one process: a run in several is
  refused naming the fix (convert in ``on_predict_start``/``on_test_start``, or after ``fabric.launch()``).
  lightning-habana 1.7 refused fp8 inference with DDP altogether;
- the measurements go under ``fp8_data_path``, by default ``$HABANA_LOGS`` (the Gaudi runtime's log folder), as
  lightning-habana did. It wrote that path into the config file it was given (its packaged files, or yours); here
  the config is read and handed to INC with the path set, and no file of yours is changed.

lightning-habana also called ``htcore.hpu_set_env()`` and ``htcore.hpu_initialize(module,
mark_only_scales_as_const=True)``: graph-compiler settings for lazy mode (inference mode, scales marked as
constants), which change no number. They are left to the user here, as INC's own examples leave them.

INC is the optional extra ``lightning-accel-habana[fp8-inference]`` (``neural-compressor-pt`` 3.7.1 to 3.10: 3.7.1 is
Intel Gaudi software 1.23's INC; 3.8 and later call ``utils.experimental._set_is_dynamic_quantization`` at every
prepare, which 1.24 has; dynamic quantization calls ``torch.ops.hpu.calculate_scale_for_cast``, which the emulator
lacks; 3.4 and earlier fail to import next to
transformers 5, which ``import lightning`` imports when installed), imported when ``convert_modules(inference=True)``
runs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from lightning_accel.core.errors import ConfigurationError

from ._files import write_text_atomically

__all__ = [
    "DATA_PATH_VAR",
    "EXTRA",
    "InferenceRun",
    "MEASURE_CONFIG",
    "QUANT_CONFIG",
    "convert",
    "finalize_calibration",
    "inc_available",
    "inference_config",
]

EXTRA = "lightning-accel-habana[fp8-inference]"
DATA_PATH_VAR = "HABANA_LOGS"
_CONFIGS = Path(__file__).parent / "quant_config" / "fp8"
MEASURE_CONFIG = _CONFIGS / "maxabs_measure.json"
QUANT_CONFIG = _CONFIGS / "maxabs_quant.json"
_MODES = ("MEASURE", "QUANTIZE")
_ACCEPTED_QUANT = (
    "True (quantize with the measurements, the packaged maxabs_quant.json), False (measure, maxabs_measure.json), "
    "the path of an INC fp8 JSON config, or a dict of one"
)


def inc_available() -> bool:
    """Whether Intel Neural Compressor's PyTorch package can be imported (it is not imported)."""
    return importlib.util.find_spec("neural_compressor") is not None


def _quantization() -> ModuleType:
    try:
        return importlib.import_module("neural_compressor.torch.quantization")
    except ImportError as exc:
        raise ConfigurationError(
            f"convert_modules(inference=True) quantizes to fp8 with Intel Neural Compressor, which cannot be imported "
            f"({exc}). Install it with `pip install '{EXTRA}'` (neural-compressor-pt 3.7.1 to 3.10), or use "
            "inference=False for fp8 training."
        ) from exc


def _read_config_file(path: Path, quant: Any) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}): the INC config file cannot be read ({exc.strerror}). Accepted: "
            f"{_ACCEPTED_QUANT}."
        ) from exc
    except ValueError as exc:
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}): the file is not JSON ({exc}). Accepted: {_ACCEPTED_QUANT}."
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}): the file holds a JSON {type(data).__name__}, not an object. Accepted: "
            f"{_ACCEPTED_QUANT}."
        )
    return data


def inference_config(quant: Any, fp8_data_path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The INC fp8 config for ``quant``, with ``dump_stats_path`` under ``fp8_data_path`` (or ``$HABANA_LOGS``).

    Raises:
        ConfigurationError: For a ``quant`` of another type, a missing or malformed config file, a mode other than
            ``"MEASURE"`` or ``"QUANTIZE"``, or neither ``fp8_data_path`` nor ``HABANA_LOGS``.
    """
    if quant is True:
        config = _read_config_file(QUANT_CONFIG, quant)
    elif quant is False:
        config = _read_config_file(MEASURE_CONFIG, quant)
    elif isinstance(quant, (str, os.PathLike)):
        path = Path(quant)
        if not path.is_file():
            raise ConfigurationError(
                f"convert_modules(quant={str(quant)!r}): no such INC config file. Accepted: {_ACCEPTED_QUANT}."
            )
        config = _read_config_file(path, quant)
    elif isinstance(quant, Mapping):
        config = dict(quant)
    else:
        raise ConfigurationError(f"convert_modules(quant={quant!r}) is not accepted. Accepted: {_ACCEPTED_QUANT}.")
    mode = config.get("mode")
    if mode not in _MODES:
        raise ConfigurationError(
            f"convert_modules(quant=...): the INC config's mode is {mode!r}. Accepted: 'MEASURE' (record the "
            "tensors' ranges while trainer.test/predict runs) or 'QUANTIZE' (run in fp8 with those measurements)."
        )
    where = fp8_data_path if fp8_data_path is not None else os.environ.get(DATA_PATH_VAR)
    if not where:
        raise ConfigurationError(
            f"convert_modules(fp8_data_path=None) with {DATA_PATH_VAR} unset: the fp8 measurements need a folder. Pass "
            f"fp8_data_path='<folder>' (the same folder for the measuring and the quantizing run), or set "
            f"{DATA_PATH_VAR}."
        )
    config["dump_stats_path"] = str(Path(where) / "inc_output" / "measure")
    return config


def convert(module: torch.nn.Module, quant: Any, fp8_data_path: str | os.PathLike[str] | None) -> bool:
    """Prepare ``module`` in place for measuring (returns ``True``) or quantize it (returns ``False``) with INC.

    Raises:
        ConfigurationError: For a bad ``quant`` or ``fp8_data_path`` (see :func:`inference_config`), an INC that
            cannot be imported, a config INC refuses, or a quantization without measurements.
    """
    config_dict = inference_config(quant, fp8_data_path)
    inc = _quantization()
    try:
        config = inc.FP8Config.from_dict(config_dict)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"convert_modules(quant={quant!r}): Intel Neural Compressor refuses the config ({exc}). Accepted: the "
            "fields of neural_compressor.torch.quantization.FP8Config (mode, observer, scale_method, allowlist, "
            "blocklist, ...)."
        ) from exc
    # INC reads the config back from a JSON file; given none, it writes one to the system's temporary folder and never
    # removes it (``FP8Config.save_temp_json_file``). Ours goes into the fp8 data folder, one per mode.
    data_folder = Path(config_dict["dump_stats_path"]).parents[1]
    config_file = data_folder / f"inc_{str(config_dict['mode']).lower()}_config.json"
    data_folder.mkdir(parents=True, exist_ok=True)
    _write_json_atomically(config_file, config.to_dict())
    config.json_file = str(config_file)
    if config.measure:
        with _no_launcher_ranks():
            inc.prepare(module, config)
        return True
    try:
        with _no_launcher_ranks(), _temporary_files_in(data_folder):
            inc.convert(module, config)
    except FileNotFoundError as exc:
        folder = Path(config_dict["dump_stats_path"]).parent
        raise ConfigurationError(
            f"convert_modules(inference=True, quant={quant!r}, fp8_data_path={fp8_data_path!r}): there are no fp8 "
            f"measurements in {str(folder)!r} ({exc}). Measure first, with the same fp8_data_path: "
            "convert_modules(module, inference=True, quant=False, fp8_data_path=...), then trainer.test(...) or "
            "trainer.predict(...) on calibration data, which writes them when it ends."
        ) from exc
    return False


def _write_json_atomically(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` whole or not at all.

    The ranks of a run share the fp8 data folder: one rank reading the config while another rewrote it in place
    (``FP8Config.to_json_file`` truncates first) got an empty file (INC's ``JSONDecodeError``).
    """
    write_text_atomically(path, json.dumps(data, indent=4))


def finalize_calibration(module: torch.nn.Module) -> None:
    """Write the measurements of a module prepared with ``quant=False`` (INC's ``finalize_calibration``)."""
    with _no_launcher_ranks():
        _quantization().finalize_calibration(module)


@contextlib.contextmanager
def _temporary_files_in(folder: Path) -> Iterator[None]:
    """Send the temporary files INC makes, and leaves behind, to a scratch folder under ``folder``, removed afterwards.

    Quantizing a model measured in this process, INC ignores the config it is given and rewrites the measuring one
    with ``"mode": "QUANTIZE"`` into a new temporary file (``fp8_quant/common.py`` ``update_mode``) that nothing
    removes: one file in the system's temporary folder per run. INC reads it back within ``convert``.
    """
    scratch = tempfile.mkdtemp(prefix=".inc-", dir=folder)
    previous, tempfile.tempdir = tempfile.tempdir, scratch
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(scratch, ignore_errors=True)


_INC_RANKS = "neural_compressor.torch.algorithms.fp8_quant.prepare_quant.prepare_model"


@contextlib.contextmanager
def _no_launcher_ranks() -> Iterator[None]:
    """Let INC see this run's ranks: ``torch.distributed``'s, or none while no process group runs.

    INC 3.7.1 keeps the rank and world size from the first time it asks (``fp8_quant/prepare_quant/prepare_model.py``
    ``get_local_rank``/``get_world_size``), and it first asks when it is imported (default arguments in
    ``fp8_quant/save_load.py``): from ``LOCAL_RANK``/``WORLD_SIZE`` as strings when a launcher set them, which it
    then compares with 0 (``_quant_common/quant_config.py:173``), a TypeError under torchrun, SLURM or Lightning's
    launcher. So INC is made to ask again, here: with a process group it asks ``torch.distributed``; without one
    fp8 inference runs in one process, and the launcher's variables are hidden from it, as without a launcher.
    """
    _forget_inc_ranks()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        yield
        return
    hidden = {name: os.environ.pop(name) for name in ("LOCAL_RANK", "WORLD_SIZE") if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(hidden)


def _forget_inc_ranks() -> None:
    ranks: Any = sys.modules.get(_INC_RANKS)
    if ranks is None:
        return
    ranks._local_rank, ranks._local_rank_initialized = -1, False
    ranks._world_size, ranks._world_size_initialized = -1, False


def _world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return 1


class InferenceRun:
    """What a precision plugin did with INC: the module it is measuring, and whether one runs in fp8 through INC.

    Example:
        >>> run = InferenceRun()
        >>> run.convert(model, quant=False, fp8_data_path="calibration")  # doctest: +SKIP
        >>> run.finish()  # after the calibration run: writes the measurements  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.measuring: torch.nn.Module | None = None
        self.active = False
        self.ranks = 1

    def convert(self, module: torch.nn.Module, quant: Any, fp8_data_path: str | os.PathLike[str] | None) -> None:
        """Measure (``quant=False`` or a ``"MEASURE"`` config) or quantize ``module`` in place; see :func:`convert`."""
        measuring = convert(module, quant, fp8_data_path)
        self.measuring = module if measuring else None
        self.active = True
        self.ranks = _world_size()

    def check_ranks(self) -> None:
        """Refuse a run with more processes than the conversion knew of (see :func:`convert` on per-rank files).

        Raises:
            ConfigurationError: When ``torch.distributed`` runs more processes than when the module was converted.
        """
        world = _world_size()
        if not self.active or world == self.ranks:
            return
        converted = "one process" if self.ranks == 1 else f"{self.ranks} processes"
        raise ConfigurationError(
            f"fp8 inference runs in {world} processes, but convert_modules(inference=True) ran in {converted}, before "
            f"they existed, so Intel Neural Compressor named its measurement files for {converted}. With several "
            "processes each rank measures into, and quantizes from, its own files (measure_hooks_maxabs_<rank>_"
            f"<world size>.npz), which INC can name only once the processes exist. Call convert_modules(...) then: in "
            "the LightningModule's on_predict_start or on_test_start hook (with Fabric, after fabric.launch()); or "
            "run with devices=1."
        )

    def finish(self) -> None:
        """After a run: write the measurements of the module being measured (once)."""
        module, self.measuring = self.measuring, None
        if module is not None:
            finalize_calibration(module)
