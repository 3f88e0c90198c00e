"""Running the pre-flight steps: one subprocess per execution mode, each a short ``Trainer.fit`` on the HPU.

Lazy mode is chosen when the SDK loads (``PT_HPU_LAZY_MODE``), so each mode runs in its own process
(``python -m lightning_accel.habana.preflight --child ...``), started with the variable set; the modes' processes run
side by side (each with ``OMP_NUM_THREADS`` set to its share of the cores, unless the user set it) and the parent
merges their reports. Objects given in Python reach the child pickled; a model given as ``module:Class`` is built there.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_accel.core.preflight_args import build_instance, import_class, parse_init_args

from .. import sdk
from .._files import write_text_atomically
from .memory import STRATEGIES, add_memory_findings, load_deepspeed_config
from .report import FORMATS, Finding, Report, merge_reports, render

__all__ = ["DEFAULT_STEPS", "main", "parse_init_args", "preflight", "run_preflight"]

#: Training steps per mode when not told: enough for a second and third step to show recompilations.
DEFAULT_STEPS = 3
_MODES = ("lazy", "compile")


def _run_here(mode: str, target: str, steps: int, precision: str | None, objects: Mapping[str, Any]) -> Report:
    """Train ``steps`` steps in this process (whose SDK mode must be ``mode``) and return the callback's report."""
    import torch
    from lightning.pytorch import Trainer

    from .collect import PreflightCallback

    model = objects["model"]
    if mode == "compile":
        # The step, loss included, is what runs on the device every iteration: compile it whole, as a user would.
        # Compiled as a function of the module (not as a bound method, which Dynamo fails to trace with self.log).
        compiled = torch.compile(type(model).training_step, backend="hpu_backend")
        model.training_step = functools.partial(compiled, model)
    callback = PreflightCallback(mode=mode, target=target)
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=steps,
        limit_train_batches=steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        precision=precision,  # type: ignore[arg-type]  # checked by Lightning, which names the accepted values
    )
    trainer.fit(model, train_dataloaders=objects.get("train_dataloaders"), datamodule=objects.get("datamodule"))
    assert callback.report is not None
    return callback.report


def _child(args: argparse.Namespace) -> int:
    # In lazy mode the SDK loads at its first import, not at `import torch`, and torch keeps the first answer to "which
    # accelerator is there" for the whole process: the user's modules (transformers asks when it is imported) must
    # come after the SDK, or the backward fails with "Cannot access accelerator device when none is available".
    sdk.core_module()
    from lightning.pytorch import LightningDataModule, LightningModule

    if args.payload:
        with open(args.payload, "rb") as handle:
            objects = pickle.load(handle)
    else:
        objects = {"model": build_instance(args.target, parse_init_args(args.init_args), "target", LightningModule)}
        if args.datamodule:
            objects["datamodule"] = build_instance(
                args.datamodule,
                parse_init_args(args.datamodule_args, "--datamodule-args"),
                "--datamodule",
                LightningDataModule,
            )
    report = _run_here(args.mode, args.target, args.steps, args.precision, objects)
    Path(args.child_output).write_text(json.dumps(report.as_dict()))
    return 0


def _child_env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PT_HPU_LAZY_MODE"] = "1" if mode == "lazy" else "0"
    # The child must import what the parent could (a model defined in a test module, a script's directory).
    paths = [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    return env


def _child_threads(modes: Sequence[str]) -> str | None:
    """Each child's share of the cores when the modes run side by side (None: the user set OMP_NUM_THREADS)."""
    if "OMP_NUM_THREADS" in os.environ:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return str(max(1, cores // max(1, len(modes))))


def _run_modes(modes: Sequence[str], child_args: list[str], target: str, steps: int) -> list[Report]:
    """Each mode's report, in the order of ``modes``; the modes' processes run side by side, each on its share of cores.

    The modes are independent (each is its own process, with the SDK loaded in that mode), so the report takes as
    long as the slowest mode rather than their sum. Ctrl-C or any error here stops every child.
    """
    threads = _child_threads(modes)
    with tempfile.TemporaryDirectory(prefix="preflight-") as tmp:
        started: list[tuple[str, Path, Path, subprocess.Popen[bytes]]] = []
        try:
            for mode in modes:
                out, log = Path(tmp, f"{mode}.json"), Path(tmp, f"{mode}.stderr")
                cmd = [sys.executable, "-m", "lightning_accel.habana.preflight", "--child", "--mode", mode]
                cmd += ["--child-output", str(out), "--steps", str(steps), *child_args]
                env = _child_env(mode)
                if threads is not None:
                    env["OMP_NUM_THREADS"] = threads
                with log.open("wb") as stderr:
                    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
                started.append((mode, out, log, process))
            for _, _, _, process in started:
                process.wait()
        finally:
            for _, _, _, process in started:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        return [_mode_report(mode, out, log, process.returncode, target, steps) for mode, out, log, process in started]


def _mode_report(mode: str, out: Path, log: Path, returncode: int, target: str, steps: int) -> Report:
    if returncode == 0 and out.exists():
        return Report.from_dict(json.loads(out.read_text()))
    stderr = log.read_text(errors="replace") if log.exists() else ""
    tail = [line for line in stderr.strip().splitlines() if line.strip()][-12:]
    # The exception's own line, not the hints torch prints after it.
    errors = [line for line in tail if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line)]
    error = errors[-1] if errors else tail[-1] if tail else f"exit status {returncode}"
    report = Report(target, steps, modes={mode: {"steps": 0, "failed": True}})
    report.findings.append(
        Finding(
            "not_run",
            mode,
            f"the training steps failed: {error}",
            "",
            "What fails here fails on Gaudi too, or the run could not be set up; no finding of this mode is known.",
            "Read the error below; run the model once on the emulated HPU in this mode to see the full traceback.",
            1,
            {"stderr_tail": tail},
        )
    )
    return report


def _fill_sites(report: Report) -> None:
    # A dispatch mode would stop Dynamo, so the compile run cannot place its CPU fallbacks; the lazy run can.
    lazy_sites = {f.what: f.where for f in report.of_kind("cpu_fallback", "lazy") if f.where}
    for finding in report.of_kind("cpu_fallback", "compile"):
        if not finding.where and finding.what in lazy_sites:
            finding.where = lazy_sites[finding.what]
            finding.details["where_from"] = "lazy run"


def _check(modes: Sequence[str], steps: int) -> None:
    unknown = [m for m in modes if m not in _MODES]
    if unknown or not modes:
        raise ValueError(f"modes={list(modes)!r}: accepted modes are {', '.join(_MODES)} (one or both).")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps={steps!r}: must be a positive int (a few, e.g. 3).")


def _check_memory(strategies: Sequence[str], world_size: int, batch_size: int | None, tp_size: int) -> None:
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or isinstance(strategies, str):
        raise ValueError(f"strategies={list(strategies)!r}: accepted strategies are {', '.join(STRATEGIES)}.")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size={world_size!r}: must be a positive int (HPUs of the predicted run, e.g. 8).")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size={batch_size!r}: must be a positive int (micro-batch per rank) or None.")
    if not isinstance(tp_size, int) or tp_size < 1 or world_size % tp_size:
        raise ValueError(f"tp_size={tp_size!r}: must be a positive int dividing world_size={world_size}.")


def run_preflight(
    target: str,
    init_args: Sequence[str] = (),
    datamodule: str | None = None,
    datamodule_args: Sequence[str] = (),
    modes: Sequence[str] = _MODES,
    steps: int = DEFAULT_STEPS,
    precision: str | None = None,
    strategies: Sequence[str] = tuple(STRATEGIES),
    world_size: int = 8,
    batch_size: int | None = None,
    tp_size: int = 2,
    deepspeed_config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> Report:
    """The report for a model given as ``module:Class`` with init arguments (what the CLI runs)."""
    _check(modes, steps)
    _check_memory(strategies, world_size, batch_size, tp_size)
    zero_config = load_deepspeed_config(deepspeed_config)
    # Imported here too, so that a misspelt path fails at once with its message rather than in each mode's process.
    import_class(target, "target")
    if datamodule:
        import_class(datamodule, "--datamodule")
    parse_init_args(init_args)
    parse_init_args(datamodule_args, "--datamodule-args")
    child_args = [target, *[a for v in init_args for a in ("--init-args", v)]]
    if datamodule:
        child_args += ["--datamodule", datamodule, *[a for v in datamodule_args for a in ("--datamodule-args", v)]]
    if precision:
        child_args += ["--precision", precision]
    report = merge_reports(_run_modes(modes, child_args, target, steps), target, steps)
    _fill_sites(report)
    add_memory_findings(report, strategies, world_size, batch_size, tp_size, zero_config)
    return report


def preflight(
    model: Any,
    datamodule: Any = None,
    train_dataloaders: Any = None,
    modes: Sequence[str] = _MODES,
    steps: int = DEFAULT_STEPS,
    precision: str | None = None,
    strategies: Sequence[str] = tuple(STRATEGIES),
    world_size: int = 8,
    batch_size: int | None = None,
    tp_size: int = 2,
    deepspeed_config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> Report:
    """Run a few training steps of ``model`` on the HPU in each mode and report what it will meet on Gaudi.

    Each mode runs in its own process; the model and its data reach it pickled, so they must be picklable
    (defined at module level, no lambdas in the data loaders).

    Args:
        model: The ``LightningModule``.
        datamodule: Its ``LightningDataModule``, if any.
        train_dataloaders: Training data loaders, when neither the model nor a data module gives them.
        modes: ``"lazy"`` and/or ``"compile"`` (eager mode with ``torch.compile(backend="hpu_backend")``).
        steps: Training steps per mode.
        precision: Lightning's ``precision=`` (e.g. ``"bf16-mixed"``), or ``None`` for the default.
        strategies: The strategies to predict device memory per rank for (see
            :data:`~lightning_accel.habana.preflight.memory.STRATEGIES`); ``()`` for none.
        world_size: HPUs of the predicted run.
        batch_size: The micro-batch per rank of the prediction (default: the one the steps ran with).
        tp_size: Tensor-parallel ranks of ``fsdp2_tp``.
        deepspeed_config: The ZeRO rows' DeepSpeed config, as the run passes it to
            ``HPUDeepSpeedStrategy(config=...)``: a dict or the path of its JSON file. Its ``zero_optimization``
            bucket and overlap settings size DeepSpeed's buffers; ``None``: HPUDeepSpeedStrategy's defaults.

    Raises:
        ValueError: For a bad mode, size, strategy or DeepSpeed config, before any step runs.

    Example:
        >>> from lightning_accel.habana.preflight import preflight, render
        >>> # print(render(preflight(MyModel(), steps=3), "markdown"))
    """
    from lightning.pytorch import LightningModule

    if not isinstance(model, LightningModule):
        raise TypeError(f"preflight(model={type(model).__name__}): expected a LightningModule.")
    _check(modes, steps)
    _check_memory(strategies, world_size, batch_size, tp_size)
    zero_config = load_deepspeed_config(deepspeed_config)
    target = f"{type(model).__module__}:{type(model).__qualname__}"
    objects = {"model": model, "datamodule": datamodule, "train_dataloaders": train_dataloaders}
    with tempfile.TemporaryDirectory(prefix="preflight-") as tmp:
        payload = Path(tmp, "objects.pkl")
        try:
            payload.write_bytes(pickle.dumps(objects))
        except Exception as exc:
            raise ValueError(
                f"preflight(): the model and its data must be picklable to run in a process per mode, but pickling "
                f"failed: {type(exc).__name__}: {exc}. Define the classes at module level, avoid lambdas in the data "
                "loaders, or run `lightning-accel preflight module:Class` instead."
            ) from None
        child_args = [target, "--payload", str(payload)]
        if precision:
            child_args += ["--precision", precision]
        report = merge_reports(_run_modes(modes, child_args, target, steps), target, steps)
    _fill_sites(report)
    add_memory_findings(report, strategies, world_size, batch_size, tp_size, zero_config)
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-accel preflight",
        description="Run a few training steps on the (emulated) HPU in lazy and compile mode and report what the "
        "model will meet on Gaudi: CPU fallbacks, recompilations, graph breaks, host synchronisations, dtype hazards.",
    )
    parser.add_argument(
        "target", nargs="?", help="the LightningModule, as 'package.module:Class' (or the config's model.class_path)"
    )
    parser.add_argument(
        "--config",
        help="a LightningCLI config (YAML): its model and data sections give the classes (class_path) or their init "
        "arguments, trainer.precision the precision; arguments given here win",
    )
    parser.add_argument(
        "--init-args", action="append", default=[], help="its init arguments: a JSON object or key=value (repeatable)"
    )
    parser.add_argument("--datamodule", help="a LightningDataModule as 'package.module:Class'")
    parser.add_argument("--datamodule-args", action="append", default=[], help="its init arguments, as --init-args")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"steps per mode (default {DEFAULT_STEPS})")
    parser.add_argument("--modes", default=",".join(_MODES), help="comma-separated: lazy,compile (default both)")
    parser.add_argument("--precision", help="Lightning's precision= (e.g. bf16-mixed)")
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"comma-separated strategies to predict memory per rank for, or 'none' (default all: "
        f"{','.join(STRATEGIES)})",
    )
    parser.add_argument("--world-size", type=int, default=8, help="HPUs of the predicted run (default 8)")
    parser.add_argument("--tp-size", type=int, default=2, help="tensor-parallel ranks of fsdp2_tp (default 2)")
    parser.add_argument(
        "--batch-size", type=int, help="micro-batch per rank of the prediction (default: the one the steps ran with)"
    )
    parser.add_argument(
        "--deepspeed-config",
        help="the run's DeepSpeed config (JSON, as HPUDeepSpeedStrategy(config=...) takes): the ZeRO rows read its "
        "bucket and overlap settings (default: HPUDeepSpeedStrategy's)",
    )
    parser.add_argument("--format", default="table", help=f"one of {', '.join(FORMATS)} (default table)")
    parser.add_argument("--output", help="write the report to this file instead of the terminal")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    parser.add_argument("--payload", help=argparse.SUPPRESS)
    return parser


def _class_path(section: Mapping[str, Any], key: str, config: str) -> str:
    path = section["class_path"]
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"--config {config}: {key}.class_path={path!r} is not 'package.module.Class'.")
    module, _, name = path.rpartition(".")
    return f"{module}:{name}"


def _apply_config(args: argparse.Namespace) -> None:
    """Fill the model, the data module, their init arguments and the precision from a LightningCLI config."""
    # PyYAML comes with Lightning (LightningCLI reads YAML with it); its type stubs are no dependency of ours.
    yaml: Any = importlib.import_module("yaml")
    try:
        config = yaml.safe_load(Path(args.config).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {args.config}: cannot read it as YAML ({exc}).") from None
    if not isinstance(config, dict):
        raise ValueError(f"--config {args.config}: expected a mapping with model/data/trainer sections.")
    for key, attr, args_attr in (("model", "target", "init_args"), ("data", "datamodule", "datamodule_args")):
        section = config.get(key) or {}
        if not isinstance(section, dict):
            raise ValueError(f"--config {args.config}: {key} is {section!r}, expected a mapping.")
        if "class_path" in section:
            if getattr(args, attr) is None:
                setattr(args, attr, _class_path(section, key, args.config))
            values = section.get("init_args") or {}
        else:
            values = section
        if values:
            # Before the command line's own, so that those win.
            setattr(args, args_attr, [json.dumps(values), *getattr(args, args_attr)])
        if key == "data" and values and getattr(args, attr) is None:
            raise ValueError(
                f"--config {args.config}: the data section gives init arguments but no class: pass --datamodule "
                "'package.module:Class' (LightningCLI's script names it) or give data.class_path."
            )
    trainer = config.get("trainer") or {}
    if args.precision is None and isinstance(trainer, dict) and trainer.get("precision") is not None:
        args.precision = str(trainer["precision"])
    unused = [f"trainer.{k}" for k in sorted(trainer) if k != "precision"] if isinstance(trainer, dict) else []
    # LightningCLI's other sections (seed_everything, optimizer, ckpt_path...) have no part in the pre-flight run.
    unused += sorted(str(k) for k in config if k not in ("model", "data", "trainer"))
    if unused:
        print(
            f"lightning-accel preflight: the pre-flight run uses its own Trainer (1 HPU, --steps steps per mode); "
            f"not used from {args.config}: {', '.join(unused)}.",
            file=sys.stderr,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``lightning-accel preflight``: returns the exit status (0: report written, 2: bad input)."""
    args = _parser().parse_args(argv)
    if args.child:
        return _child(args)
    if args.format not in FORMATS:
        print(f"lightning-accel preflight: --format {args.format!r}: accepted {', '.join(FORMATS)}.", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.config:
        try:
            _apply_config(args)
        except ValueError as exc:
            print(f"lightning-accel preflight: {exc}", file=sys.stderr)
            return 2
    if not args.target:
        print(
            "lightning-accel preflight: no model given. Pass it as 'package.module:Class', or a --config whose "
            "model section has a class_path.",
            file=sys.stderr,
        )
        return 2
    # As `python -m` would: a `module:Class` next to where the command runs is importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        strategies = [s.strip() for s in args.strategies.split(",") if s.strip() and s.strip() != "none"]
        report = run_preflight(
            args.target,
            args.init_args,
            args.datamodule,
            args.datamodule_args,
            modes,
            args.steps,
            args.precision,
            strategies,
            args.world_size,
            args.batch_size,
            args.tp_size,
            args.deepspeed_config,
        )
    except ValueError as exc:
        print(f"lightning-accel preflight: {exc}", file=sys.stderr)
        return 2
    text = render(report, args.format)
    if args.output:
        try:
            write_text_atomically(Path(args.output), text)
        except OSError as exc:
            print(f"lightning-accel preflight: --output {args.output}: cannot write it ({exc}).", file=sys.stderr)
            return 2
        print(f"lightning-accel preflight: report written to {args.output}")
    else:
        sys.stdout.write(text)
    return 0
