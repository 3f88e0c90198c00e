"""Step time of the causal-LM recipe (examples/habana/transformers/run_clm.py) on the emulator: eager, compiled, graphs.

The recipe runs as a user starts it, one fresh process per variant: ``run_clm.py fit --config configs/clm_tiny.yaml
--config configs/<variant>.yaml`` (a 2-layer GPT-2 of width 64 from a config in code, batch 8 x 32 characters of
data/corpus.txt; nothing is downloaded), for ``--steps`` optimizer steps. The recipe reports the wall time of each
training batch (forward, backward, optimizer step, loss read back); the step time here is the median over the steps
after the first ``WARMUP`` (which hold the compilation and the graph captures). Variants:

- ``eager``: eager mode, uncompiled (``PT_HPU_LAZY_MODE=0``);
- ``compiled``: eager mode, ``HPUCompile(regions=True)`` with ``hpu_backend`` from the second step;
- ``hpu_graphs``: lazy mode (``PT_HPU_LAZY_MODE=1``), ``HPUGraphs(stages=("fit",))``.

A variant that fails is recorded as failed, with the last line of its error. These are the emulator's figures (the
device is torch's CPU kernels and Inductor's C++ code behind the SDK's API), not Gaudi's: they show the recipe's
overhead per variant on this machine, not what Gaudi gains from compilation or graphs. Results go to
benchmarks/results/transformers_recipes.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
RECIPES = Path(__file__).resolve().parent.parent / "examples" / "habana" / "transformers"
VARIANTS = {"eager": ("eager", "0"), "compiled": ("compile", "0"), "hpu_graphs": ("hpu_graphs", "1")}
WARMUP = 3


def _run(variant: str, steps: int) -> dict[str, object]:
    config, lazy = VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PT_HPU_", "HABANA_"))}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PT_HPU_LAZY_MODE=lazy)
    env.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")
    args = [sys.executable, str(RECIPES / "run_clm.py"), "fit", "--config", str(RECIPES / "configs" / "clm_tiny.yaml")]
    args += ["--config", str(RECIPES / "configs" / f"{config}.yaml"), "--training.max_steps", str(steps)]
    done = subprocess.run(args, env=env, cwd=RECIPES, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        return {"ok": False, "error": errors[-1] if errors else f"exit code {done.returncode}"}
    result = json.loads(lines[-1][len("RESULT ") :])
    times = result["step_times"][WARMUP:]
    return {
        "ok": True,
        "warmup_s": sum(result["step_times"][:WARMUP]),
        "step_s": statistics.median(times),
        "final_loss": result["losses"][-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    runs = {variant: _run(variant, args.steps) for variant in VARIANTS}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "transformers_recipes.json").write_text(
        json.dumps({"steps": args.steps, "warmup": WARMUP, "runs": runs}, indent=2) + "\n"
    )
    lines = [
        "# Causal-LM recipe step time on the emulator",
        "",
        f"run_clm.py with configs/clm_tiny.yaml (2-layer GPT-2, width 64, batch 8 x 32), {args.steps} steps: the "
        f"median step after the first {WARMUP}, whose sum (first steps) holds the compilation and the captures. "
        "Emulator figures, not Gaudi's. See benchmarks/bench_transformers_recipes.py.",
        "",
        "| variant | first steps (s) | step (ms) | final loss |",
        "|---|---|---|---|",
    ]
    for variant, run in runs.items():
        if run["ok"]:
            lines.append(
                f"| {variant} | {run['warmup_s']:.2f} | {1000 * float(run['step_s']):.1f} | "  # type: ignore[arg-type]
                f"{run['final_loss']:.3f} |"
            )
        else:
            lines.append(f"| {variant} | failed: {run['error']} | | |")
    (RESULTS / "transformers_recipes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
