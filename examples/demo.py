"""The main job: train the digits classifier on the emulated Gaudi (1 and 2 HPUs, and DeepSpeed ZeRO-3 in bf16 on 2)
and the emulated IPU.

Each run is its own process (the two-HPU runs are DDP and DeepSpeed over the emulated HCCL backend, one process per
HPU). The script
prints every run's validation accuracy and wall time, and writes into ``--output`` (default ``demo_output``):

* ``loss_curves.png``: training loss against training samples seen, one line per run;
* ``summary.md``: a table of the runs (accelerator, devices, accuracy, seconds);
* ``logs/<run>/``: each run's CSVLogger metrics.

    python examples/demo.py                      # the emulators are switched on for you
    python examples/demo.py --output /tmp/demo --max-epochs 3

On a machine with Gaudi or IPUs, set ``LIGHTNING_ACCEL_EMULATE=0`` to use the hardware instead; the summary says
which was used. The models and data are those of ``examples/habana/train_digits.py`` and
``examples/graphcore/train_digits.py``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Run:
    """One training run of the demo."""

    name: str
    accelerator: str
    devices: int
    device_iterations: int = 1
    strategy: str = "auto"
    precision: str = "32-true"

    @property
    def label(self) -> str:
        kind = "Gaudi (HPU)" if self.accelerator == "hpu" else "Graphcore (IPU)"
        extra = f", {self.device_iterations} device iterations" if self.device_iterations > 1 else ""
        if self.strategy == "hpu_deepspeed_stage_3":
            extra += ", DeepSpeed ZeRO-3"
        if self.precision != "32-true":
            extra += f", {self.precision}"
        return f"{kind} x{self.devices}{extra}"


RUNS = (
    Run("hpu-1", "hpu", 1),
    Run("hpu-2", "hpu", 2),
    Run("hpu-2-zero3-bf16", "hpu", 2, strategy="hpu_deepspeed_stage_3", precision="bf16-mixed"),
    Run("ipu-8x4", "ipu", 8, device_iterations=4),
)


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"demo_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(run: Run, output: Path, max_epochs: int) -> None:
    """Train one run in this process (the child side); rank 0 writes ``<output>/<run>.json``."""
    from lightning.pytorch import Trainer, seed_everything
    from lightning.pytorch.loggers import CSVLogger

    from lightning_accel.core.emulation import emulation_settings

    example = _load(EXAMPLES / ("habana" if run.accelerator == "hpu" else "graphcore") / "train_digits.py")
    seed_everything(0, workers=True)
    if run.accelerator == "hpu":
        train_loader, val_loader = example.loaders(64)
        strategy: object = run.strategy
    else:
        from lightning_accel.graphcore import IPUStrategy

        train_loader, val_loader = example.loaders(4)
        strategy = IPUStrategy(device_iterations=run.device_iterations)
    trainer = Trainer(
        accelerator=run.accelerator,
        devices=run.devices,
        strategy=strategy,  # type: ignore[arg-type]
        precision=run.precision,  # type: ignore[arg-type]
        max_epochs=max_epochs,
        logger=CSVLogger(output / "logs", name=run.name, version=0),
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    started = time.perf_counter()
    trainer.fit(example.DigitsMLP(), train_loader, val_loader)
    seconds = time.perf_counter() - started
    if trainer.is_global_zero:
        batch = train_loader.batch_size or 1
        result = {
            **asdict(run),
            "label": run.label,
            "mode": "emulated" if emulation_settings().emulates(run.accelerator) else "hardware",
            "accuracy": float(trainer.callback_metrics["val_acc"]),
            "fit_seconds": seconds,
            "samples_per_step": batch * run.devices * run.device_iterations,
            "metrics_csv": str(Path(trainer.logger.log_dir) / "metrics.csv"),  # type: ignore[union-attr]
        }
        (output / f"{run.name}.json").write_text(json.dumps(result, indent=2))


def _loss_curve(metrics_csv: Path, samples_per_step: int) -> tuple[list[int], list[float]]:
    samples, losses = [], []
    with metrics_csv.open() as handle:
        for row in csv.DictReader(handle):
            if row.get("train_loss"):
                samples.append((int(row["step"]) + 1) * samples_per_step)
                losses.append(float(row["train_loss"]))
    return samples, losses


def plot(results: list[dict[str, object]], path: Path) -> None:
    """Training loss against samples seen, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for result in results:
        samples, losses = _loss_curve(Path(str(result["metrics_csv"])), int(str(result["samples_per_step"])))
        axes.plot(samples, losses, label=f"{result['label']} ({result['mode']})", linewidth=1.2)
    axes.set_xlabel("training samples seen, all devices (steps x global batch)")
    axes.set_ylabel("training loss (rank 0, last micro-batch of each step)")
    axes.set_yscale("log")
    axes.set_title("Digits classifier: training loss per run")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def summarize(results: list[dict[str, object]], path: Path, max_epochs: int) -> None:
    """Write the table of runs as Markdown."""
    lines = [
        "# lightning-accel demo: digits classifier",
        "",
        f"The 8x8 handwritten digits (1437 / 1400 training samples), {max_epochs} epochs per run, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPU core(s).",
        "",
        "| run | accelerator | devices | strategy | precision | device iterations | mode | validation accuracy "
        "| fit seconds | process seconds |",
        "| --- | --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['accelerator']} | {r['devices']} | {r['strategy']} | {r['precision']} | "
            f"{r['device_iterations']} | {r['mode']} | "
            f"{float(str(r['accuracy'])):.4f} | {float(str(r['fit_seconds'])):.1f} | "
            f"{float(str(r['process_seconds'])):.1f} |"
        )
    lines += [
        "",
        "Emulated runs compute with PyTorch on the CPU: their accuracy shows that the Lightning integration trains "
        "correctly; their times say nothing about Gaudi or IPU speed. Fit seconds exclude interpreter start-up; "
        "process seconds include it (and, for two HPUs, starting the second process).",
        "",
        "![loss curves](loss_curves.png)",
        "",
    ]
    path.write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("demo_output"), help="where to write (demo_output)")
    parser.add_argument("--max-epochs", type=int, default=10, help="epochs per run (default 10)")
    parser.add_argument("--run", choices=[r.name for r in RUNS], help=argparse.SUPPRESS)  # child processes
    args = parser.parse_args()
    output = args.output.resolve()

    if args.run:
        train(next(r for r in RUNS if r.name == args.run), output, args.max_epochs)
        return 0

    output.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu,ipu")
    env.setdefault("PYTHONWARNINGS", "ignore")
    results = []
    for run in RUNS:
        print(f"--- {run.label}: training ...", flush=True)
        (output / f"{run.name}.json").unlink(missing_ok=True)
        started = time.perf_counter()
        command = [sys.executable, __file__, "--run", run.name, "--output", str(output)]
        done = subprocess.run([*command, "--max-epochs", str(args.max_epochs)], env=env, capture_output=True, text=True)
        process_seconds = time.perf_counter() - started
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-6000:], sep="\n", file=sys.stderr)
            print(f"run {run.name} failed (exit {done.returncode})", file=sys.stderr)
            return 1
        result = json.loads((output / f"{run.name}.json").read_text())
        result["process_seconds"] = process_seconds
        results.append(result)
        print(
            f"    {run.label} ({result['mode']}): validation accuracy {result['accuracy']:.4f}, "
            f"fit {result['fit_seconds']:.1f} s, process {process_seconds:.1f} s",
            flush=True,
        )
    plot(results, output / "loss_curves.png")
    summarize(results, output / "summary.md", args.max_epochs)
    (output / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {output / 'loss_curves.png'} and {output / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
