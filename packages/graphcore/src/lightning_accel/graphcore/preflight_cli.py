r"""``lightning-accel preflight --device ipu package.module:Class``: the IPU report from the command line.

The core's CLI hands the arguments after ``preflight --device ipu`` to :func:`main` (``PluginSpec.preflight`` of the
graphcore plugin). It builds the LightningModule from its ``module:Class`` path and init arguments, takes the first
batch of its ``train_dataloader()`` (or of a ``--datamodule``'s), and prints :func:`~.preflight.ipu_preflight`'s
findings and the estimated memory per IPU as a table, Markdown or JSON.

Example:
    .. code-block:: console

        $ LIGHTNING_ACCEL_EMULATE=ipu lightning-accel preflight --device ipu my_project.model:Net \
              --init-args hidden=64 --ipus 4 --format markdown
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from lightning_accel.core.preflight_args import build_instance, parse_init_args

__all__ = ["FORMATS", "main", "render"]

FORMATS = ("table", "markdown", "json")
#: Findings that stop the model from compiling or fitting on the IPU: the command exits with 1 when one is found.
_BLOCKING = ("unsupported_op", "loss", "dynamic_shape", "not_compiled", "memory")


def _first_batch(model: Any, datamodule: Any) -> list[Any]:
    import torch

    source = datamodule if datamodule is not None else model
    if datamodule is not None:
        datamodule.setup("fit")
    try:
        loader = source.train_dataloader()
    except Exception as exc:  # Lightning's default raises MisconfigurationException when none is defined
        raise ValueError(
            f"{type(source).__name__}.train_dataloader() failed ({type(exc).__name__}: {exc}); the report needs one "
            "batch: define train_dataloader() or pass --datamodule package.module:DataModule."
        ) from None
    batch = next(iter(loader))
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, (list, tuple)):
        return list(batch)
    raise ValueError(
        f"the first batch of {type(source).__name__}.train_dataloader() is a {type(batch).__name__}: the IPU report "
        "passes a batch's tensors to training_step as a list, so it takes a tensor, a list or a tuple."
    )


def _optimizer_of(model: Any, name: str | None) -> Any:
    if name:
        return name
    try:
        configured: Any = model.configure_optimizers()
    except Exception as exc:  # any failure: the user can name the optimizer instead
        raise ValueError(
            f"{type(model).__name__}.configure_optimizers() failed ({type(exc).__name__}: {exc}); pass --optimizer "
            "sgd|sgd_momentum|adam|adamw|lamb|rmsprop."
        ) from None
    while isinstance(configured, (list, tuple)) and configured:
        configured = configured[0]
    if isinstance(configured, dict):
        configured = configured.get("optimizer")
    if configured is None or isinstance(configured, (list, tuple)):
        raise ValueError(
            f"{type(model).__name__}.configure_optimizers() gave no optimizer; pass --optimizer "
            "sgd|sgd_momentum|adam|adamw|lamb|rmsprop."
        )
    return configured


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-accel preflight --device ipu",
        description="What poptorch 3.4 refuses in a LightningModule's training step, and its memory per IPU "
        "(an estimate made without Poplar).",
    )
    parser.add_argument("target", help="the LightningModule, as package.module:Class")
    parser.add_argument("--init-args", nargs="*", default=[], help="its init arguments: a JSON object or key=value")
    parser.add_argument("--datamodule", help="a LightningDataModule (package.module:Class) giving the batch")
    parser.add_argument("--datamodule-args", nargs="*", default=[], help="its init arguments")
    parser.add_argument("--ipus", type=int, default=1, help="suggest a pipeline split over this many IPUs (>= 2)")
    parser.add_argument("--optimizer", help="sgd, sgd_momentum, adam, adamw, lamb or rmsprop (default: the model's)")
    parser.add_argument("--gradient-accumulation", type=int, default=1, help="poptorch's gradientAccumulation")
    parser.add_argument("--ipu-type", default="gc200", help="gc200 (Mk2, default), bow or gc2")
    parser.add_argument("--format", default="table", help=f"one of {', '.join(FORMATS)}")
    parser.add_argument("--output", help="write the report to this file instead of the terminal")
    return parser


def _report(args: argparse.Namespace) -> dict[str, Any]:
    from lightning.pytorch import LightningDataModule, LightningModule

    from .preflight import ipu_preflight
    from .preflight_memory import ipu_memory

    model = build_instance(args.target, parse_init_args(args.init_args, "--init-args"), "target", LightningModule)
    datamodule = None
    if args.datamodule:
        datamodule = build_instance(
            args.datamodule,
            parse_init_args(args.datamodule_args, "--datamodule-args"),
            "--datamodule",
            LightningDataModule,
        )
    batch = _first_batch(model, datamodule)
    optimizer = _optimizer_of(model, args.optimizer)
    options = {"optimizer": optimizer, "gradient_accumulation": args.gradient_accumulation, "device": args.ipu_type}
    findings = ipu_preflight(model, *batch, ipus=args.ipus, **options)
    split = [f for f in findings if f.kind == "pipeline_split"]
    if split:
        stages = split[0].details["stages"]
    else:
        stages = [s.as_dict() for s in ipu_memory(model, *batch, **options)]
    return {
        "target": args.target,
        "device": args.ipu_type,
        "optimizer": optimizer if isinstance(optimizer, str) else type(optimizer).__name__,
        "findings": [
            {"kind": f.kind, "what": f.what, "where": f.where, "why": f.why, "fix": f.fix, "details": f.details}
            for f in findings
        ],
        "memory": stages,
    }


def _mib(value: int) -> str:
    return f"{value / 2**20:.1f}"


def render(report: dict[str, Any], fmt: str) -> str:
    """The report as ``table`` (terminal), ``markdown`` or ``json``.

    Raises:
        ValueError: For a format not in :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: accepted {', '.join(FORMATS)}.")
    if fmt == "json":
        return json.dumps(report, indent=2, default=str) + "\n"
    memory_head = ["IPU", "blocks", "weights", "gradients", "optimizer", "activations x stash", "total MiB", "fits"]
    memory_rows = [
        [
            str(s["ipu"]),
            ",".join(map(str, s["blocks"])) or "-",
            _mib(s["weights"]),
            _mib(s["gradients"]),
            _mib(s["optimizer"]),
            f"{_mib(s['activations'])} x {s['stash']}",
            f"{_mib(s['total'])} of {_mib(s['capacity'])}",
            "yes" if s["fits"] else "NO",
        ]
        for s in report["memory"]
    ]
    finding_rows = [[f["kind"], f["what"], f["where"] or "-", f["why"], f["fix"]] for f in report["findings"]]
    title = f"Pre-flight report for IPU ({report['device']}, optimizer {report['optimizer']}): {report['target']}"
    if fmt == "markdown":

        def table(head: list[str], rows: list[list[str]]) -> list[str]:
            cells = [[c.replace("|", "\\|") for c in row] for row in rows]
            return [
                "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head),
                *("| " + " | ".join(row) + " |" for row in cells),
            ]

        lines = [f"# {title}", "", "## Findings", ""]
        lines += table(["kind", "what", "where", "why", "fix"], finding_rows) if finding_rows else ["None."]
        lines += ["", "## Memory per IPU (MiB, estimated without Poplar)", ""]
        lines += table(memory_head, memory_rows)
        return "\n".join(lines) + "\n"
    lines = [title, "", "Findings:" if finding_rows else "Findings: none"]
    for kind, what, where, why, fix in finding_rows:
        lines += [f"  [{kind}] {what}", f"      where: {where}", f"      why:   {why}", f"      fix:   {fix}"]
    widths = [max(len(row[i]) for row in [memory_head, *memory_rows]) for i in range(len(memory_head))]
    lines += ["", "Memory per IPU (MiB, estimated without Poplar: no code, exchange or tile-level accounting):"]
    for row in [memory_head, *memory_rows]:
        lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The IPU report: 0 when nothing blocks the IPU, 1 when something does, 2: bad input."""
    args = _parser().parse_args(argv)
    if args.format not in FORMATS:
        print(f"lightning-accel preflight: --format {args.format!r}: accepted {', '.join(FORMATS)}.", file=sys.stderr)
        return 2
    # As `python -m` would: a `module:Class` next to where the command runs is importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from lightning_accel.core.errors import DeviceUnavailableError

    try:
        report = _report(args)
    except (ValueError, DeviceUnavailableError) as exc:  # bad input, or no poptorch (nor its emulator) to compile
        print(f"lightning-accel preflight: {exc}", file=sys.stderr)
        return 2
    text = render(report, args.format)
    if args.output:
        Path(args.output).write_text(text)
        print(f"lightning-accel preflight: report written to {args.output}")
    else:
        sys.stdout.write(text)
    return 1 if any(f["kind"] in _BLOCKING for f in report["findings"]) else 0
