"""The Gaudi self-test checks: each trains a small model on the HPUs the SDK provides and verifies the result.

They use the public API only (``accelerator="hpu"``, the strategies by name, the plugins), as a user's script does,
and never ask whether the SDK is emulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_accel.core.selftest.checks import CheckContext, CheckFailed, CheckSkipped
from lightning_accel.core.selftest.workloads import accuracy, classifier, loader

__all__ = ["bf16", "checkpoint", "compile", "ddp", "fit", "fp8", "fsdp", "graphs", "model_parallel", "profiler"]

MIN_ACCURACY = 0.9
_QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _trainer(**kwargs: Any) -> Any:
    from lightning.pytorch import Trainer

    options: dict[str, Any] = {"accelerator": "hpu", "devices": 1, "enable_checkpointing": False, **_QUIET}
    options.update(kwargs)
    return Trainer(**options)


def _require_accuracy(model: Any, what: str) -> float:
    score = accuracy(model)
    if score < MIN_ACCURACY:
        raise CheckFailed(f"{what}: accuracy {score:.3f}, expected at least {MIN_ACCURACY}")
    return score


def fit(ctx: CheckContext) -> str:
    """One HPU, the Trainer's default strategy: the model and the batch are on the HPU and it learns."""
    from lightning.pytorch import Callback, seed_everything

    where: list[str] = []

    class Where(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            where[:] = [str(batch[0].device), str(next(pl_module.parameters()).device)]

    seed_everything(0)
    model = classifier()
    trainer = _trainer(max_epochs=2, callbacks=[Where()])
    trainer.fit(model, loader())
    if not where or any(not device.startswith("hpu") for device in where):
        raise CheckFailed(f"in training_step the batch and the parameters were on {where}, expected 'hpu' devices")
    score = _require_accuracy(model, "fit on one HPU")
    return f"accuracy {score:.3f} after {trainer.global_step} steps on {where[1]} ({type(trainer.strategy).__name__})"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(ctx: CheckContext, strategy: str, devices: int, child: str = "distributed") -> list[dict[str, Any]]:
    """Start one process per device at once, as torchrun does, and read each rank's result.

    Each runs ``python -m lightning_accel.habana._selftest.<child>`` (``distributed``, or ``model_parallel``).

    All ranks start together (``LOCAL_RANK`` set: Lightning sees processes created outside it), so their start-up
    overlaps instead of the launcher's children starting after it has imported everything.
    """
    out = ctx.workdir / strategy
    out.mkdir()
    command = [sys.executable, "-m", f"lightning_accel.habana._selftest.{child}"]
    command += ["--out", str(out), "--devices", str(devices), "--strategy", strategy]
    # Everything else passes on unchanged: the ranks use the same SDK (real or emulated) as this process.
    base = {k: v for k, v in os.environ.items() if k not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK"}}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(devices), NODE_RANK="0")
    ranks = []
    logs = [(out / f"rank{rank}.log").open("w") for rank in range(devices)]
    try:
        for rank in range(devices):
            env = {**base, "LOCAL_RANK": str(rank), "RANK": str(rank)}
            ranks.append(subprocess.Popen(command, env=env, stdout=logs[rank], stderr=subprocess.STDOUT, cwd=out))
        codes = [rank.wait(timeout=600) for rank in ranks]
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
        for log in logs:
            log.close()
    failed = [rank for rank, code in enumerate(codes) if code != 0]
    if failed:
        tail = (out / f"rank{failed[0]}.log").read_text()[-3000:]
        raise CheckFailed(f"rank {failed[0]} of {devices} exited with {codes[failed[0]]}:\n{tail}")
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(devices)]


def ddp(ctx: CheckContext) -> str:
    """Every HPU in one process each over HCCL: all ranks end with the same weights, and they learned."""
    import torch

    if ctx.devices < 2:
        raise CheckSkipped(f"DDP needs at least 2 HPUs; {ctx.devices} visible")
    results = _launch(ctx, "hpu_parallel", ctx.devices)
    weights = [torch.load(ctx.workdir / "hpu_parallel" / f"rank{r}.pt") for r in range(ctx.devices)]
    for rank, state in enumerate(weights[1:], start=1):
        different = [name for name, value in state.items() if not torch.equal(value, weights[0][name])]
        if different:
            raise CheckFailed(f"rank {rank} ended with other weights than rank 0 in {', '.join(different)}")
    if any(r["world_size"] != ctx.devices or r["backend"] != "hccl" for r in results):
        raise CheckFailed(f"expected {ctx.devices} ranks over 'hccl', got {results}")
    if results[0]["accuracy"] < MIN_ACCURACY:
        raise CheckFailed(f"DDP: accuracy {results[0]['accuracy']:.3f}, expected at least {MIN_ACCURACY}")
    return f"{ctx.devices} ranks over hccl, identical weights, accuracy {results[0]['accuracy']:.3f}"


def fsdp(ctx: CheckContext) -> str:
    """``strategy="hpu_fsdp"`` on two HPUs trains (skipped while the installed package has no FSDP strategy)."""
    from lightning.pytorch.strategies import StrategyRegistry

    if "hpu_fsdp" not in StrategyRegistry:
        raise CheckSkipped(
            "FSDP is not installed: this lightning-accel-habana registers no strategy 'hpu_fsdp' (FSDP on HPUs comes "
            "with a later release)"
        )
    if ctx.devices < 2:
        raise CheckSkipped(f"FSDP needs at least 2 HPUs; {ctx.devices} visible")
    results = _launch(ctx, "hpu_fsdp", 2)
    losses = [r["loss"] for r in results]
    if not all(loss < 0.5 for loss in losses):
        raise CheckFailed(f"FSDP: final training losses {losses}, expected below 0.5 on every rank")
    return f"2 ranks, final losses {', '.join(f'{loss:.3f}' for loss in losses)}"


def model_parallel(ctx: CheckContext) -> str:
    """``strategy="hpu_model_parallel"`` on two HPUs, FSDP2 only: the parameters are HPU shards and the model learns."""
    if ctx.devices < 2:
        raise CheckSkipped(f"model parallelism needs at least 2 HPUs; {ctx.devices} visible")
    results = _launch(ctx, "hpu_model_parallel", 2, child="model_parallel")
    mesh = {"device_type": "hpu", "shape": [2, 1], "names": ["data_parallel", "tensor_parallel"]}
    for r in results:
        if r["world_size"] != 2 or r["backend"] != "hccl" or r["strategy"] != "HPUModelParallelStrategy":
            raise CheckFailed(
                f"rank {r['rank']}: {r['strategy']} with {r['world_size']} ranks over {r['backend']!r}, expected "
                "HPUModelParallelStrategy with 2 ranks over 'hccl'"
            )
        if r["mesh"] != mesh:
            raise CheckFailed(f"rank {r['rank']}: device mesh {r['mesh']}, expected {mesh}")
        held = {name: (p["type"], p["device"]) for name, p in r["parameters"].items()}
        if any(where != ("DTensor", "hpu") for where in held.values()):
            raise CheckFailed(f"rank {r['rank']}: parameters {held}, expected DTensors on 'hpu' (fully_shard)")
        local = sum(p["local"] for p in r["parameters"].values())
        full = sum(p["full"] for p in r["parameters"].values())
        if local * 2 != full:
            raise CheckFailed(f"rank {r['rank']} holds {local} of the {full} parameter elements, expected half")
    scores = [r["accuracy"] for r in results]
    if len(set(scores)) != 1:
        raise CheckFailed(f"the ranks measured different accuracies of the same sharded model: {scores}")
    if scores[0] < MIN_ACCURACY:
        raise CheckFailed(f"model parallel: accuracy {scores[0]:.3f}, expected at least {MIN_ACCURACY}")
    return f"2 ranks over hccl, FSDP2 shards of {local} / {full} elements on hpu, accuracy {scores[0]:.3f}"


def checkpoint(ctx: CheckContext) -> str:
    """Train, save, resume in a new Trainer from the file: the step count continues and the weights are restored."""
    import torch
    from lightning.pytorch import Callback, seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint

    seed_everything(0)
    first = classifier()
    saver = ModelCheckpoint(dirpath=ctx.workdir, filename="last")
    _trainer(max_epochs=1, enable_checkpointing=True, callbacks=[saver]).fit(first, loader())
    path = Path(saver.best_model_path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    restored: dict[str, bool] = {}

    class Compare(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            for name, value in pl_module.state_dict().items():
                restored[name] = torch.equal(value.detach().to("cpu"), saved["state_dict"][name])

    second = classifier()
    trainer = _trainer(max_epochs=2, callbacks=[Compare()])
    trainer.fit(second, loader(), ckpt_path=path)
    if not restored or not all(restored.values()):
        raise CheckFailed(f"weights not restored from {path.name}: {[n for n, ok in restored.items() if not ok]}")
    if trainer.global_step != 2 * saved["global_step"]:
        raise CheckFailed(f"resumed at step {saved['global_step']} and ended at {trainer.global_step}, expected x2")
    score = _require_accuracy(second, "resumed training")
    return f"saved at step {saved['global_step']}, resumed to {trainer.global_step}, accuracy {score:.3f}"


def profiler(ctx: CheckContext) -> str:
    """HPUProfiler writes a Chrome trace whose events include the model's matrix products."""
    from lightning_accel.habana import HPUProfiler

    profiler = HPUProfiler(dirpath=ctx.workdir, filename="selftest")
    _trainer(max_epochs=1, limit_train_batches=5, profiler=profiler).fit(classifier(), loader())
    traces = sorted(ctx.workdir.glob("*.pt.trace.json"))
    if not traces:
        raise CheckFailed(
            f"no *.pt.trace.json in the profiler's directory: {sorted(p.name for p in ctx.workdir.iterdir())}"
        )
    events = json.loads(traces[0].read_text())["traceEvents"]
    names = {str(event.get("name", "")) for event in events}
    if not any("addmm" in name or "linear" in name or "mm" in name for name in names):
        raise CheckFailed(f"the trace {traces[0].name} has {len(events)} events but no matrix product")
    return f"{traces[0].name}: {len(events)} events"


def bf16(ctx: CheckContext) -> str:
    """bf16-mixed with the operator lists the SDK loaded: linear in bfloat16, log_softmax and the weights in float32."""
    import torch
    import torch.nn.functional as F
    from lightning.pytorch import seed_everything

    from lightning_accel.habana import HPUPrecisionPlugin

    lower = os.environ["PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST"]
    fp32 = os.environ["PT_HPU_AUTOCAST_FP32_OPS_LIST"]
    seen: dict[str, torch.dtype] = {}
    seed_everything(0)
    model = classifier()

    def training_step(batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        hidden = model.net[0](x)
        log_probs = torch.log_softmax(model.net[2](torch.relu(hidden)), dim=1)
        seen.update(linear=hidden.dtype, log_softmax=log_probs.dtype, weight=model.net[0].weight.dtype)
        return F.nll_loss(log_probs, y)

    model.training_step = training_step
    plugin = HPUPrecisionPlugin(precision="bf16-mixed", bf16_file_path=lower, fp32_file_path=fp32)
    _trainer(max_epochs=2, plugins=[plugin]).fit(model, loader())
    expected = {"linear": torch.bfloat16, "log_softmax": torch.float32, "weight": torch.float32}
    if seen != expected:
        raise CheckFailed(f"dtypes inside training_step {seen}, expected {expected}")
    score = _require_accuracy(model, "bf16-mixed")
    return f"linear bfloat16, log_softmax float32, weights float32; accuracy {score:.3f}"


def graphs(ctx: CheckContext) -> str:
    """Lazy mode: a training step captured as an HPU graph replays and learns; HPUGraphs predicts correctly."""
    import torch
    import torch.nn.functional as F
    from lightning.pytorch import seed_everything

    from lightning_accel.habana import HPUAccelerator, HPUGraphs
    from lightning_accel.habana.sdk import hpu

    if not HPUAccelerator.is_lazy():
        raise CheckFailed("PT_HPU_LAZY_MODE=1 was set before the SDK loaded, but the SDK runs in eager mode")
    seed_everything(0)
    model = classifier()
    model.automatic_optimization = False
    state: dict[str, Any] = {}

    def training_step(batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = model.optimizers()
        if "graph" not in state:
            state["x"], state["y"] = batch[0].clone(), batch[1].clone()
            state["graph"] = hpu.HPUGraph()
            optimizer.zero_grad(set_to_none=True)
            with hpu.graph(state["graph"]):  # capturing also runs this first step
                state["loss"] = F.cross_entropy(model(state["x"]), state["y"])
                state["loss"].backward()
                optimizer.step()
        else:
            state["x"].copy_(batch[0])
            state["y"].copy_(batch[1])
            state["graph"].replay()
        state.setdefault("first", float(state["loss"]))
        return state["loss"]

    model.training_step = training_step
    _trainer(max_epochs=2).fit(model, loader())
    last = float(state["loss"])
    if not last < state["first"] / 2:
        raise CheckFailed(f"replayed training: loss {state['first']:.3f} -> {last:.3f}, expected at least halved")
    predictions = _trainer(callbacks=[HPUGraphs()]).predict(model, loader(seed=1))
    from lightning_accel.core.selftest.workloads import blobs

    labels = blobs(512, seed=1)[1][: sum(len(p) for p in predictions)]
    score = float((torch.cat([p.to("cpu") for p in predictions]) == labels).float().mean())
    if score < MIN_ACCURACY:
        raise CheckFailed(f"graphed prediction: accuracy {score:.3f}, expected at least {MIN_ACCURACY}")
    return f"replayed loss {state['first']:.3f} -> {last:.3f}; graphed prediction accuracy {score:.3f}"


def compile(ctx: CheckContext) -> str:
    """Eager mode: ``torch.compile(model, backend="hpu_backend")`` trains to a real accuracy."""
    import torch
    from lightning.pytorch import seed_everything

    seed_everything(0)
    model = classifier(log=False)
    compiled = torch.compile(model, backend="hpu_backend")
    trainer = _trainer(max_epochs=2)
    trainer.fit(compiled, loader())
    score = _require_accuracy(model, "compiled training")
    return f"accuracy {score:.3f} after {trainer.global_step} compiled steps"


def fp8(ctx: CheckContext) -> str:
    """fp8 training: the Linear layers become the SDK's Transformer Engine layers and the model learns."""
    import torch
    from lightning.pytorch import seed_everything

    from lightning_accel.habana import HPUAccelerator, HPUPrecisionPlugin

    available = getattr(HPUAccelerator, "is_fp8_available", None)
    if available is None or not hasattr(HPUPrecisionPlugin, "convert_modules"):
        raise CheckSkipped(
            "fp8 is not installed: this lightning-accel-habana has no HPUAccelerator.is_fp8_available / "
            "HPUPrecisionPlugin.convert_modules (fp8 training comes with a later release)"
        )
    supported, reason = available()
    if not supported:
        raise CheckSkipped(f"fp8 is not available on this device: {reason}")
    seed_everything(0)
    model = classifier()
    plugin = HPUPrecisionPlugin(precision="fp8")
    plugin.convert_modules(model, replace_layers=True)
    kinds = {
        f"{type(layer).__module__}.{type(layer).__name__}" for layer in model.net if type(layer) is not torch.nn.ReLU
    }
    if any(type(layer) is torch.nn.Linear for layer in model.net):
        raise CheckFailed(f"convert_modules(replace_layers=True) left torch.nn.Linear layers: {kinds}")
    _trainer(max_epochs=2, plugins=[plugin]).fit(model, loader())
    score = _require_accuracy(model, "fp8 training")
    return f"layers {', '.join(sorted(kinds))}; accuracy {score:.3f}"
