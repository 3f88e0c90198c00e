"""The emulated "hpu" torch device (the C++ device under the emulated SDK) against stock CPU tensors.

Two measurements, both in one process with 1 torch thread:

1. Per-operation cost: a small add, a view (``t()``) and a small matmul on "hpu" tensors vs CPU tensors, in
   microseconds per call (best of several repeats). A bare wrapper subclass (one line of ``__torch_dispatch__``, no
   device rules, no accounting) is timed as well: torch's own cost for any Python tensor subclass, the floor of the
   Python wrapper device the emulated SDK ran on before the C++ device, which does not dispatch into Python.
2. Training steps of an MLP (3 linear layers, cross-entropy, backward, SGD with momentum), tiny (hidden 256, batch 16)
   and compute-bound (hidden 2048, batch 256), run nine ways:

   - ``cpu eager``: stock CPU tensors, the reference;
   - ``bare wrapper``: the bare wrapper subclass, eager (the floor of a device made of Python wrapper tensors);
   - ``hpu eager``: the emulated "hpu" device, eager;
   - ``hpu graph replay``: the whole step captured once into an ``HPUGraph`` and replayed;
   - ``cpu inductor``: the step under ``torch.compile`` (Inductor) on CPU tensors: the loss function (forward and,
     through AOTAutograd, backward) and the optimizer step compiled;
   - ``hpu hpu_backend``: the same under ``torch.compile(backend="hpu_backend")`` on "hpu" tensors;
   - ``bare wrapper inductor``: the same under ``torch.compile`` (Inductor) on a traceable version of the bare
     wrapper subclass: what torch costs around a compiled step whose tensors are a Python wrapper subclass
     (AOTAutograd unwraps every input and wraps every output, dynamo guards each input, autograd's seed gradient and
     ``.grad`` detaches dispatch into Python), the floor of ``hpu_backend`` on the Python wrapper device;
   - ``Trainer.fit cpu`` / ``Trainer.fit hpu``: the same model as a LightningModule under ``Trainer.fit`` with
     ``accelerator="cpu"`` and ``accelerator="hpu"`` (see ``bench_hpu_overhead.fit_steps_per_second``).

   Method: steps per second of the process's CPU time (``time.process_time``: all its threads, so a shared machine's
   other load does not count), best of ``--rounds`` rounds; within a round the variants run one after another
   (interleaved), so drift on the machine affects all alike. Targets (issue 21): graph replay >= 0.9 of cpu eager;
   hpu_backend >= 0.9 of cpu inductor; hpu eager >= 0.9 of the bare wrapper; Trainer.fit hpu >= 0.95 of Trainer.fit
   cpu on the compute-bound step. hpu_backend against the compiled bare wrapper is shown as well, with the 0.9 that
   eager has against its floor.

The HPU graph is built with the emulator's ``HPUGraph`` class directly: the SDK exports it in lazy mode only, where
``torch.compile`` is refused, and this script measures both in one process. Results go to
benchmarks/results/hpu_device.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LIGHTNING_ACCEL_EMULATE", "hpu")

import torch
import torch.nn.functional as F

RESULTS = Path(__file__).parent / "results"
SIZES = {"tiny": (256, 16), "compute-bound": (2048, 256)}
VARIANTS = (
    "cpu eager",
    "bare wrapper",
    "hpu eager",
    "hpu graph replay",
    "cpu inductor",
    "hpu hpu_backend",
    "bare wrapper inductor",
    "Trainer.fit cpu",
    "Trainer.fit hpu",
)
RATIOS = (
    # (name, numerator, denominator, target)
    ("hpu eager / bare wrapper", "hpu eager", "bare wrapper", 0.9),
    ("graph replay / cpu eager", "hpu graph replay", "cpu eager", 0.9),
    ("hpu_backend / cpu inductor", "hpu hpu_backend", "cpu inductor", 0.9),
    ("hpu_backend / bare wrapper inductor", "hpu hpu_backend", "bare wrapper inductor", 0.9),
    ("Trainer.fit hpu / cpu", "Trainer.fit hpu", "Trainer.fit cpu", 0.95),
    ("hpu eager / cpu eager", "hpu eager", "cpu eager", None),
)


class BareWrapper(torch.Tensor):
    """The least a wrapper tensor on "hpu" can do: unwrap the arguments, run the operation, wrap the results.

    No device rules, no memory accounting, no lazy mode: what any Python implementation of an "hpu" device made of
    wrapper tensors pays at least. It trains (autograd, SGD) but is not a device anyone should use.
    """

    _elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        unwrapped = []
        for arg in args:
            if type(arg) is BareWrapper:
                unwrapped.append(arg._elem)
            elif type(arg) in (list, tuple):
                unwrapped.append([a._elem if type(a) is BareWrapper else a for a in arg])
            else:
                unwrapped.append(arg)
        options = {k: v._elem if type(v) is BareWrapper else v for k, v in (kwargs or {}).items()}
        if "device" in options:
            options["device"] = torch.device("cpu")
        out = func(*unwrapped, **options)
        if type(out) is torch.Tensor:
            return bare(out)
        if type(out) in (list, tuple):
            return type(out)(bare(o) if type(o) is torch.Tensor else o for o in out)
        return out


class TraceableBareWrapper(BareWrapper):
    """The bare wrapper made traceable by ``torch.compile`` (the two methods of torch's wrapper-subclass protocol).

    Its dispatch also wraps the fake tensors that tracing produces (``isinstance``, where the eager one checks the
    exact type for speed). Nothing else: no device rules, no accounting.
    """

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        def unwrap(arg: Any) -> Any:
            return arg._elem if isinstance(arg, BareWrapper) else arg

        unwrapped = [[unwrap(a) for a in arg] if type(arg) in (list, tuple) else unwrap(arg) for arg in args]
        options = {k: unwrap(v) for k, v in (kwargs or {}).items()}
        if "device" in options:
            options["device"] = torch.device("cpu")
        out = func(*unwrapped, **options)

        def wrap(result: Any) -> Any:
            if isinstance(result, torch.Tensor) and not isinstance(result, BareWrapper):
                return bare(result, TraceableBareWrapper)
            return result

        if type(out) in (list, tuple):
            return type(out)(wrap(o) for o in out)
        return wrap(out)

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["_elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], meta: Any, size: Any, stride: Any) -> BareWrapper:
        return bare(inner["_elem"], TraceableBareWrapper)


def bare(elem: torch.Tensor, kind: type[BareWrapper] = BareWrapper) -> BareWrapper:
    out: BareWrapper = torch.Tensor._make_wrapper_subclass(
        kind,
        elem.size(),
        strides=elem.stride(),
        storage_offset=elem.storage_offset(),
        dtype=elem.dtype,
        device=torch.device("hpu", 0),
        requires_grad=False,
    )
    out._elem = elem
    return out


def per_op_us(number: int) -> dict[str, dict[str, float]]:
    small, matrix = torch.ones(64), torch.randn(32, 32)
    tensors = {
        "cpu": (small, matrix),
        "hpu": (small.to("hpu"), matrix.to("hpu")),
        "bare wrapper": (bare(small), bare(matrix)),
    }
    ops = {
        "add (64 floats)": lambda v, m: v + v,
        "view t() (32x32)": lambda v, m: m.t(),
        "mm (32x32)": lambda v, m: m @ m,
    }
    table: dict[str, dict[str, float]] = {}
    for op_name, op in ops.items():
        table[op_name] = {}
        for kind, (v, m) in tensors.items():
            best = min(timeit.repeat(lambda op=op, v=v, m=m: op(v, m), number=number, repeat=7))
            table[op_name][kind] = best / number * 1e6
    return table


def _mlp(hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def _on(device: str, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...]:
    if device.startswith("bare wrapper"):
        kind = TraceableBareWrapper if device == "bare wrapper inductor" else BareWrapper
        for module in model.modules():
            for name, param in list(module._parameters.items()):
                if param is not None:
                    module._parameters[name] = torch.nn.Parameter(bare(param.detach().clone(), kind))
        return model, bare(x, kind), bare(y, kind)
    return model.to(device), x.to(device), y.to(device)


def make_step(variant: str, hidden: int, batch: int) -> Callable[[], None]:
    """One training step of ``variant`` (see the module docstring), ready to call; set-up and compilation done."""
    model = _mlp(hidden)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, hidden, generator=generator), torch.randint(0, 10, (batch,), generator=generator)
    device = {"cpu eager": "cpu", "cpu inductor": "cpu"}.get(variant, variant if "bare" in variant else "hpu")
    model, x, y = _on(device, model, x, y)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn: Callable[..., torch.Tensor] = lambda a, b: F.cross_entropy(model(a), b)  # noqa: E731
    update: Callable[[], Any] = optimizer.step
    if variant in ("cpu inductor", "hpu hpu_backend", "bare wrapper inductor"):
        backend = "hpu_backend" if variant == "hpu hpu_backend" else "inductor"
        loss_fn = torch.compile(loss_fn, backend=backend, dynamic=False)
        update = torch.compile(optimizer.step, backend=backend, dynamic=False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(x, y).backward()
        update()

    for _ in range(3):  # warm-up: compilation, the optimizer's momentum buffers
        step()
    if variant != "hpu graph replay":
        return step
    from lightning_accel.habana_emulator.hpu.graphs import HPUGraph, graph

    optimizer.zero_grad(set_to_none=True)
    hpu_graph = HPUGraph()
    with graph(hpu_graph):
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return hpu_graph.replay


def steps_per_second(step: Callable[[], None], steps: int) -> float:
    """Steps per second of the process's CPU time (all its threads)."""
    start = time.process_time()
    for _ in range(steps):
        step()
    return steps / (time.process_time() - start)


def measure(hidden: int, batch: int, steps: int, fit_batches: int, rounds: int) -> dict[str, list[float]]:
    from bench_hpu_overhead import fit_steps_per_second

    torch._dynamo.reset()  # each size compiles its own static-shape graphs
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    stepping = {variant: make_step(variant, hidden, batch) for variant in VARIANTS if not variant.startswith("Trainer")}
    for _ in range(rounds):
        for variant in VARIANTS:
            if variant.startswith("Trainer"):
                accelerator = variant.rsplit(" ", 1)[1]
                samples[variant].append(fit_steps_per_second(accelerator, hidden, batch, fit_batches))
            else:
                samples[variant].append(steps_per_second(stepping[variant], steps))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tiny-steps", type=int, default=200)
    parser.add_argument("--big-steps", type=int, default=5)
    parser.add_argument("--tiny-fit-batches", type=int, default=200)
    parser.add_argument("--big-fit-batches", type=int, default=6)
    parser.add_argument("--op-calls", type=int, default=5000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import lightning_accel.habana_emulator.dynamo.compile_backend  # noqa: F401  (registers hpu_backend, as the SDK)

    ops = per_op_us(args.op_calls)
    runs: dict[str, Any] = {}
    for name, (hidden, batch) in SIZES.items():
        tiny = name == "tiny"
        samples = measure(
            hidden,
            batch,
            args.tiny_steps if tiny else args.big_steps,
            args.tiny_fit_batches if tiny else args.big_fit_batches,
            args.rounds,
        )
        best = {variant: max(values) for variant, values in samples.items()}
        runs[name] = {
            "hidden": hidden,
            "batch": batch,
            "samples_steps_per_cpu_s": samples,
            "best_steps_per_cpu_s": best,
            "ratios": {label: best[num] / best[den] for label, num, den, _ in RATIOS},
        }
    record = {
        "method": "process CPU time, best of interleaved rounds, 1 torch thread",
        "rounds": args.rounds,
        "torch_threads": 1,
        "per_op_us": ops,
        "targets": {label: target for label, _, _, target in RATIOS if target is not None},
        "training": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hpu_device.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        '# The emulated "hpu" torch device vs stock CPU tensors',
        "",
        "1 torch thread, CPU backing. Per-operation cost: best of 7 repeats. Training steps: steps per second of the "
        f"process's CPU time, best of {args.rounds} interleaved rounds.",
        "",
        "## Per-operation cost (microseconds per call)",
        "",
        "| operation | cpu | hpu (emulated) | bare wrapper subclass | hpu - cpu |",
        "| --- | --- | --- | --- | --- |",
    ]
    for op_name, row in ops.items():
        lines.append(
            f"| {op_name} | {row['cpu']:.1f} | {row['hpu']:.1f} | {row['bare wrapper']:.1f} | "
            f"{row['hpu'] - row['cpu']:.1f} |"
        )
    lines += [
        "",
        "The bare wrapper subclass is torch's own cost of a Python tensor subclass (dispatch into Python, one",
        "wrapper per result): the floor of the Python wrapper device the emulated SDK ran on before its C++ device,",
        "which does not dispatch into Python.",
        "",
        "## Training step: MLP (3 linear layers), cross-entropy, backward, SGD with momentum (steps per CPU second)",
        "",
        "| step | " + " | ".join(VARIANTS) + " |",
        "| --- | " + " | ".join("---" for _ in VARIANTS) + " |",
    ]
    for name, run in runs.items():
        cells = " | ".join(f"{run['best_steps_per_cpu_s'][v]:.1f}" for v in VARIANTS)
        lines.append(f"| {name} (hidden {run['hidden']}, batch {run['batch']}) | {cells} |")
    lines += [
        "",
        "## Ratios and targets",
        "",
        "| step | " + " | ".join(label for label, *_ in RATIOS) + " |",
        "| --- | " + " | ".join("---" for _ in RATIOS) + " |",
    ]
    for name, run in runs.items():
        cells = []
        for label, _, _, target in RATIOS:
            value = run["ratios"][label]
            verdict = "" if target is None else (" (met)" if value >= target else " (NOT met)")
            cells.append(f"**{value:.3f}**{verdict}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Targets: hpu eager >= 0.9 of the bare wrapper; graph replay >= 0.9 of cpu eager; hpu_backend >= 0.9 of cpu",
        "inductor; Trainer.fit on hpu >= 0.95 of Trainer.fit on cpu (the compute-bound step is the target; the tiny",
        "one is shown for what the per-operation cost does to a small step). hpu_backend against the bare wrapper",
        "under Inductor is held to the 0.9 that eager has against its floor.",
        "",
        "The bare wrapper trains the eager step on the subclass of the first table (unwrap, run, wrap; no device",
        "rules, no accounting): every operation of a device built of Python wrapper tensors crosses into Python and",
        "makes a wrapper per result, so this is about the most eager execution of such a device reaches on this torch.",
        "Under Inductor it pays what torch does around each compiled call on wrapper tensors (AOTAutograd unwraps",
        "every input and wraps every output, dynamo guards every input) and in autograd outside it (the seed",
        "gradient, the detach of each gradient stored in .grad): the floor of hpu_backend on such a device. The",
        "emulated hpu is a C++ device, bound by neither floor: its eager operations go through a C++ fallback to the",
        "CPU's kernels, a graph replay runs the captured operations on host views of the captured memory, and",
        "hpu_backend's C++ kernels run on the HPU tensors' memory.",
    ]
    (RESULTS / "hpu_device.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
