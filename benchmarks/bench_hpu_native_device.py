"""The C++ emulated HPU (lightning_accel.emulated_hpu) against stock CPU tensors, as ratios from one run.

Runs in a process of its own without LIGHTNING_ACCEL_EMULATE: it measures the device alone, with a stand-in for the
SDK's ``torch.hpu`` module (the emulated SDK, which loads at ``import torch`` when that variable is set, would register
its own). Writes benchmarks/results/hpu_native_device.{md,json}. Also times a fresh build of the extension into a
temporary cache folder (what a user's first load costs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

WORKER = r"""
import json, sys, time, types
import torch
from lightning_accel import emulated_hpu
emulated_hpu.load()
module = types.ModuleType("torch.hpu")  # stands in for the SDK's hpu module, which registers torch.hpu on Gaudi
for name, value in dict(is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
                        is_initialized=lambda: True, _is_in_bad_fork=lambda: False, _lazy_init=lambda: None).items():
    setattr(module, name, value)
torch._register_device_module("hpu", module)
torch.set_num_threads(1)

def per_call(fn, calls=20000, repeats=7):
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6

ops = {}
for device in ("cpu", "hpu"):
    a64, b64 = torch.randn(64, device=device), torch.randn(64, device=device)
    a, b = torch.randn(32, 32, device=device), torch.randn(32, 32, device=device)
    ops[device] = {"add (64 floats)": per_call(lambda: a64 + b64), "view t() (32x32)": per_call(lambda: a.t()),
                   "mm (32x32)": per_call(lambda: a @ b)}

def make_step(device, hidden, batch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 64, device=device), torch.randint(0, 10, (batch,), device=device)
    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step

steps = {}
for name, hidden, batch, count in (("tiny (hidden 256, batch 16)", 256, 16, 300),
                                   ("compute-bound (hidden 2048, batch 256)", 2048, 256, 6)):
    runs = {device: make_step(device, hidden, batch) for device in ("cpu", "hpu")}
    best = {device: 0.0 for device in runs}
    for step in runs.values():
        for _ in range(max(3, count // 10)):
            step()
    for _ in range(5):  # interleaved rounds: both devices see the same machine load
        for device, step in runs.items():
            start = time.process_time()
            for _ in range(count):
                step()
            best[device] = max(best[device], count / (time.process_time() - start))
    steps[name] = best
print(json.dumps({"ops": ops, "steps": steps}))
"""


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTNING_ACCEL_EMULATE", "PT_HPU_"))}
    env.update(extra)
    return env


_TIMED_LOAD = """
import time
start = time.perf_counter()
from lightning_accel import emulated_hpu
emulated_hpu.load()
print(time.perf_counter() - start)
"""


def fresh_build_seconds() -> float:
    with tempfile.TemporaryDirectory() as cache:
        code = _TIMED_LOAD
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=_environment(LIGHTNING_ACCEL_CACHE_DIR=cache),
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout.strip().splitlines()[-1])


def cached_load_seconds() -> float:
    out = subprocess.run(
        [sys.executable, "-c", "import torch\n" + _TIMED_LOAD],
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    build = fresh_build_seconds()
    load = cached_load_seconds()
    out = subprocess.run([sys.executable, "-c", WORKER], env=_environment(), capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data.update(build_seconds=build, cached_load_seconds=load, cores=os.cpu_count())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hpu_native_device.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# The C++ emulated HPU (`lightning_accel.emulated_hpu`) vs stock CPU tensors",
        "",
        "1 torch thread, CPU backing, one run of `benchmarks/bench_hpu_native_device.py`. Per-operation cost: best of "
        "7 repeats. Training steps: steps per second of the process's CPU time, best of 5 interleaved rounds.",
        "",
        f"Build of the extension into an empty cache: {build:.0f} s on this machine ({data['cores']} cores); loading "
        f"the cached build (import and registration): {load:.2f} s.",
        "",
        "## Per-operation cost (microseconds per call)",
        "",
        "| operation | cpu | hpu (C++ device) | hpu / cpu | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for op, cpu in data["ops"]["cpu"].items():
        hpu = data["ops"]["hpu"][op]
        met = "met" if hpu <= 3.0 or hpu / cpu <= 2.5 else "NOT met"
        lines.append(f"| {op} | {cpu:.2f} | {hpu:.2f} | {hpu / cpu:.2f} | <= 3 us or 2.5x cpu ({met}) |")
    lines += [
        "",
        "## Training step: MLP (3 linear layers), cross-entropy, backward, SGD with momentum (steps per CPU second)",
        "",
        "| step | cpu eager | hpu eager | hpu / cpu | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, result in data["steps"].items():
        ratio = result["hpu"] / result["cpu"]
        goal = 0.7 if name.startswith("tiny") else 0.97
        lines.append(
            f"| {name} | {result['cpu']:.1f} | {result['hpu']:.1f} | **{ratio:.3f}** | >= {goal} "
            f"({'met' if ratio >= goal else 'NOT met'}) |"
        )
    lines += [
        "",
        "`Trainer.fit` and `hpu_backend` on this device, with the emulated SDK and the Lightning integration on top: "
        "`hpu_device.md` and `hpu_overhead.md`.",
        "",
    ]
    (RESULTS / "hpu_native_device.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
