"""The emulated ``hpu.metrics`` and ``utils.experimental.detect_recompilation`` count what the emulator compiles.

Source: gaudi-pytorch-bridge bcc5172, ``python_packages/habana_frameworks/torch/hpu/metrics/`` (names, fields, the
local context, the dump formats, the exit dump), and 1.19.0's ``backend/synapse_helpers/graph.cpp:612-620`` (a
``GRAPH_COMPILE`` event per Synapse graph compiled outside eager mode's per-operator recipes). The tests run in one
child pytest process, as the compile tests do (loading the ``"hpu"`` device and Inductor's state cannot be undone).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from _child_pytest import isolated_in_child
from _emulator_helpers import PYTHON, script_env

pytestmark = pytest.mark.emulator_only


def _fresh_dynamo() -> None:
    import lightning_accel.habana_emulator  # noqa: F401  (the SDK's load: the device and hpu_backend)

    torch._dynamo.reset()


CHILD_VAR = "LIGHTNING_ACCEL_TEST_HPU_METRICS_CHILD"
isolated = isolated_in_child(__file__, CHILD_VAR, timeout=900, before_each=_fresh_dynamo, LIGHTNING_ACCEL_EMULATE="hpu")


def _stats(metric: object) -> dict[str, object]:
    return dict(metric.stats())  # type: ignore[attr-defined]


def _compilations() -> int:
    from lightning_accel.habana_emulator.hpu.metrics import metric_global

    return int(_stats(metric_global("graph_compilation"))["TotalNumber"])  # type: ignore[arg-type]


@isolated
def test_the_sdks_metrics_and_fields() -> None:
    from lightning_accel.habana_emulator.hpu import metrics

    assert metrics.metric_global("no_such_metric") is None  # the SDK returns None (metrics.py:79-83)
    assert metrics.metric_global("recipe_cache") is None  # registered only with PT_HPU_ENABLE_CACHE_METRICS=1
    fields = {name: list(_stats(metrics.metric_global(name))) for name in ("graph_compilation", "cpu_fallback")}
    fields["memory_defragmentation"] = list(_stats(metrics.metric_global("memory_defragmentation")))
    assert fields == {
        "graph_compilation": ["TotalNumber", "TotalTime", "AvgTime"],
        "cpu_fallback": ["TotalNumber", "FallbackOps"],
        "memory_defragmentation": ["TotalNumber", "TotalSuccessful", "AvgTime", "MaxTime"],
    }
    # Filled when the device's context finishes, at the process's exit (test_the_exit_dump_...).
    assert metrics.metric_global("device_memory").stats() == {}
    with pytest.raises(metrics.MetricNotFoundError, match="no_such_metric"):
        with metrics.metric_localcontext("no_such_metric"):
            pass


@isolated
def test_each_hpu_backend_compilation_counts_once_and_a_cache_hit_does_not(eager_mode: None) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    compiled = torch.compile(f, backend="hpu_backend")
    before = _compilations()
    compiled(torch.ones(4, 8, device="hpu"))
    assert _compilations() == before + 1
    compiled(torch.ones(4, 8, device="hpu"))  # the same shapes: Dynamo's cache, no compilation
    assert _compilations() == before + 1
    torch._dynamo.config.automatic_dynamic_shapes = False
    try:
        compiled(torch.ones(2, 8, device="hpu"))  # a new shape: a recompilation
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = True
    assert _compilations() == before + 2


@isolated
def test_a_local_context_counts_only_inside_it(eager_mode: None) -> None:
    from lightning_accel.habana_emulator.hpu.metrics import metric_localcontext

    def g(x: torch.Tensor) -> torch.Tensor:
        return x.cos() - 1

    compiled = torch.compile(g, backend="hpu_backend")
    with metric_localcontext("graph_compilation") as local:
        compiled(torch.ones(3, device="hpu"))
        inside = _stats(local)
    torch.compile(lambda x: x * 3, backend="hpu_backend")(torch.ones(3, device="hpu"))
    assert inside["TotalNumber"] == 1
    assert _stats(local)["TotalNumber"] == 1  # stopped at the block's end
    assert _stats(local)["TotalTime"] > 0  # microseconds of Inductor's compilation


@isolated
def test_an_hpu_graph_capture_counts_one_compilation(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as htcore
    from lightning_accel.habana_emulator.hpu import graphs

    x = torch.ones(2, 4, device="hpu")
    htcore.mark_step()  # the graph that filled x compiles here (or hits the cache), before the count
    before = _compilations()
    g = graphs.HPUGraph()
    with graphs.graph(g):
        y = x * 2
    g.replay()
    g.replay()
    assert _compilations() == before + 1
    assert torch.equal(y.cpu(), torch.full((2, 4), 2.0))


@isolated
def test_metrics_dump_writes_the_sdks_json_and_text(tmp_path: Path) -> None:
    from lightning_accel.habana_emulator.hpu.metrics import metric_global, metrics_dump
    from lightning_accel.habana_emulator.hpu.metrics.saver import MetricDumpFormat

    metrics_dump(str(tmp_path / "m.json"))
    metrics_dump(str(tmp_path / "m.json"))  # a taken name gets ".1" (saver.py:36-50)
    dumped = json.loads((tmp_path / "m.json").read_text())
    assert [entry["metric_name"] for entry in dumped] == [
        "graph_compilation",
        "cpu_fallback",
        "memory_defragmentation",
        "device_memory",
    ]
    assert dumped[0]["triggered_by"] == "user"
    assert set(dumped[0]["statistics"]) == {"TotalNumber", "TotalTime", "AvgTime"}
    assert json.loads((tmp_path / "m.json.1").read_text())[1]["statistics"] == _stats(metric_global("cpu_fallback"))
    metrics_dump(str(tmp_path / "m.txt"), MetricDumpFormat.text)
    text = (tmp_path / "m.txt").read_text()
    # The trigger is formatted by f-string, as on the SDK: "MetricDumpTrigger.user" or "user" by Python version.
    first = text.splitlines()[:3]
    assert first[0] == "Metric name: graph_compilation"
    assert first[1].startswith("Triggered by: ") and first[1].endswith("user")
    assert first[2].startswith("Generated on: ")
    assert "Statistics:\n\tTotalNumber: " in text


@isolated
def test_a_metric_takes_in_its_queued_events_when_read_and_can_be_unregistered(eager_mode: None) -> None:
    from lightning_accel.habana_emulator.hpu.metrics import metrics

    before = _compilations()
    metrics._record_graph_compilation("a_graph", 5)
    metrics._record_graph_compilation("another", 7)
    assert _compilations() == before + 2  # queued until read, as the bridge's dispatcher queues them

    class SecondCount(metrics.GraphCompilationMetric):
        def name(self) -> str:
            return "second_compilation_count"

    manager = metrics._manager()
    manager.register("second_compilation_count", SecondCount)
    with pytest.raises(AssertionError, match=r"Metric with given name \(second_compilation_count\) is already"):
        manager.register("second_compilation_count", SecondCount)
    metrics._record_graph_compilation("a_third", 1)
    assert _stats(metrics.metric_global("second_compilation_count"))["TotalNumber"] == 1
    manager.unregister("second_compilation_count")
    assert metrics.metric_global("second_compilation_count") is None
    with pytest.raises(AssertionError, match=r"\(second_compilation_count\) is not registered"):
        manager.unregister("second_compilation_count")


_EXIT_DUMP_SCRIPT = """
import sys, torch
import habana_frameworks.torch.hpu as hpu
if sys.argv[1] == "use":
    keep = torch.ones(256, 1024, device="hpu")  # 1 MiB: the device is acquired
print(hpu.is_initialized())
"""


@pytest.mark.parametrize("use", ["use", "idle"])
def test_the_exit_dump_is_written_once_the_device_was_acquired(tmp_path: Path, use: str) -> None:
    # At the exit the SDK dumps the global metrics if the device was acquired (its saver is enabled on the bridge's
    # DEVICE_ACQUIRED event), after the device context reported its peak memory (device_memory).
    target = tmp_path / "exit.json"
    env = script_env(LIGHTNING_ACCEL_EMULATE="hpu", PT_HPU_METRICS_FILE=str(target))
    done = subprocess.run([PYTHON, "-c", _EXIT_DUMP_SCRIPT, use], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if use == "idle":
        assert done.stdout.split() == ["False"] and not target.exists()
        return
    dumped = {entry["metric_name"]: entry for entry in json.loads(target.read_text())}
    assert set(dumped) == {"graph_compilation", "cpu_fallback", "memory_defragmentation", "device_memory"}
    assert dumped["device_memory"]["triggered_by"] == "process_exit"
    assert dumped["device_memory"]["statistics"]["peak_bytes"] >= 1 << 20
    assert dumped["device_memory"]["statistics"]["workspace_bytes"] == 0


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


class _Net(torch.nn.Module):
    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * 2


@isolated
def test_detect_recompilation_reports_the_module_that_recompiles_on_a_new_shape(
    lazy_mode: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lightning_accel.habana_emulator.hpu import graphs
    from lightning_accel.habana_emulator.utils.experimental import detect_recompilation_auto_model

    # The body is captured once per input shape. Inside the capture the wrapper of fc marks a step, which on Gaudi
    # compiles (and captures) the graph so far (habana_lazy/hlexec.cpp:137-168): fc compiles at each capture too.
    net = _Net(graphs.wrap_in_hpu_graph(_Block().to("hpu").eval()))
    model = detect_recompilation_auto_model(net, waittime=0, csv_out=str(tmp_path / "out"))
    with torch.no_grad():
        for rows in (4, 4, 2, 2):
            model(torch.ones(rows, 8, device="hpu"))
    model.analyse_dynamicity()
    rows = (tmp_path / "out_1.csv").read_text().splitlines()
    assert rows[0] == "Step,Recompiling modules,New in,New out,Class,Location,Comment"
    # Step 0 compiles; step 2 (the first 2-row batch) recaptures the body, for its new input (inner modules first).
    recompiled = [row.split(",") for row in rows[1:]]
    assert [(r[0], r[1], r[2], r[6]) for r in recompiled] == [
        ("0", "Net/body/fc", "True", "Recompiled due to new input shape"),
        ("0", "Net/body", "True", "Recompiled due to new input shape"),
        ("0", "Net", "True", "Recompiled due to new input shape"),
        ("2", "Net/body/fc", "True", "Recompiled due to new input shape"),
        ("2", "Net/body", "True", "Recompiled due to new input shape"),
        ("2", "Net", "True", "Recompiled due to new input shape"),
    ]
    assert sorted((tmp_path / "out_2.csv").read_text().splitlines()[1:]) == ["Net,2", "Net/body,2", "Net/body/fc,2"]
    assert "Recompile count" in capsys.readouterr().out  # the printed table


@isolated
def test_detect_recompilation_reports_a_plain_lazy_mode_module_that_recompiles_on_a_new_shape(
    lazy_mode: None, tmp_path: Path
) -> None:
    from lightning_accel.habana_emulator.utils.experimental import detect_recompilation_auto_model

    # No HPU graphs: the graphs lazy mode builds between step marks compile, once per new shape.
    model = detect_recompilation_auto_model(_Net(_Block().to("hpu")), waittime=0, csv_out=str(tmp_path / "out"))
    for rows in (4, 4, 2, 2, 4):
        model(torch.ones(rows, 8, device="hpu")).sum().backward()
    model.analyse_dynamicity()
    recompiled = [row.split(",") for row in (tmp_path / "out_1.csv").read_text().splitlines()[1:]]
    assert [(r[0], r[1], r[2], r[6]) for r in recompiled] == [
        ("0", "Net/body", "True", "Recompiled due to new input shape"),
        ("0", "Net", "True", "Recompiled due to new input shape"),
        ("2", "Net/body", "True", "Recompiled due to new input shape"),
        ("2", "Net", "True", "Recompiled due to new input shape"),
    ]


@isolated
def test_in_lazy_mode_each_new_graph_compiles_once_and_a_repeated_step_hits_the_recipe_cache(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as htcore

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).to("hpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    htcore.mark_step()
    per_step, losses = [], []
    for rows in (4, 4, 2, 4, 2):
        before = _compilations()
        loss = model(torch.randn(rows, 8).to("hpu")).square().mean()
        loss.backward()
        htcore.mark_step()  # forward and backward: one graph
        optimizer.step()
        optimizer.zero_grad()
        htcore.mark_step()  # the update: another
        losses.append(loss.item())  # a materialized result: read without a graph
        per_step.append(_compilations() - before)
    # Both graphs of the first step compile; the repeated step hits the cache; a 2-row batch compiles a new forward
    # and backward (its update has the same shapes); later steps of either size hit the cache.
    assert per_step == [2, 0, 1, 0, 0]
    before = _compilations()
    value = (model.weight * 3).sum().item()  # the host reads a pending result: its graph compiles first
    assert _compilations() == before + 1
    assert value == pytest.approx(3 * model.weight.sum().item(), rel=1e-5)


@isolated
def test_in_lazy_mode_integer_arguments_shape_the_graph_and_floating_point_values_do_not(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as htcore

    x = torch.ones(4, 4, device="hpu")
    htcore.mark_step()
    per_step = []
    for dim, scale in ((0, 0.1), (0, 0.2), (1, 0.3), (1, 0.1), (0, 0.5)):
        before = _compilations()
        (x.sum(dim) * scale).add_(x[0], alpha=scale)
        htcore.mark_step()
        per_step.append(_compilations() - before)
    # Another reduced dimension is another graph; another scale is data fed to the same graph.
    assert per_step == [1, 0, 1, 0, 0]


_RECIPE_CACHE_SCRIPT = """
import torch
import habana_frameworks.torch.core as htcore
from habana_frameworks.torch.hpu.metrics import metric_localcontext
with metric_localcontext("recipe_cache") as cache:
    for rows in (4, 4, 2, 4):
        (torch.ones(rows, device="hpu") * 3).sum()
        htcore.mark_step()
stats = dict(cache.stats())
print(stats["TotalHit"], stats["TotalMiss"], sorted(stats["RecipeHit"].values()), sorted(stats["RecipeMiss"].values()))
"""


def test_recipe_cache_metrics_count_a_hit_or_a_miss_per_lazy_mode_graph() -> None:
    env = script_env(LIGHTNING_ACCEL_EMULATE="hpu", PT_HPU_LAZY_MODE="1", PT_HPU_ENABLE_CACHE_METRICS="1")
    done = subprocess.run([PYTHON, "-c", _RECIPE_CACHE_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # Four steps of two graph shapes: the 4-row graph misses once and hits twice, the 2-row graph misses once.
    assert done.stdout.split("\n")[-2] == "2 2 [2] [1, 1]"


def _fallbacks() -> dict[str, object]:
    from lightning_accel.habana_emulator.hpu.metrics import metric_global

    return _stats(metric_global("cpu_fallback"))


@isolated
def test_operators_without_a_gaudi_kernel_count_as_cpu_fallbacks_by_name(eager_mode: None) -> None:
    from lightning_accel.habana_emulator.hpu.metrics import metric_localcontext

    x = torch.tensor([1, 2, 2, 5], device="hpu")
    with metric_localcontext("cpu_fallback") as local:
        # Gaudi has kernels for these (the bridge's ops.hpu) or torch decomposes them above the HPU key: not counted.
        y = torch.stack([x, x]).float() * 2 + torch.zeros_like(x)
        torch.nn.functional.linear(y, torch.ones(3, 4, device="hpu")).sum()
        assert _stats(local) == {"TotalNumber": 0, "FallbackOps": {}}
        # No HPU kernel on Gaudi: each call runs through the SDK's CPU fallback and is counted by its name.
        counts = torch.bincount(x)
        torch.bincount(x)
        torch.histc(y, bins=4)
    assert torch.equal(counts.cpu(), torch.tensor([0, 1, 2, 0, 0, 1]))
    assert _stats(local) == {"TotalNumber": 3, "FallbackOps": {"aten::bincount": 2, "aten::histc": 1}}
    assert _fallbacks()["FallbackOps"]["aten::bincount"] >= 2  # type: ignore[index]


@isolated
def test_a_cpu_fallback_inside_an_hpu_graph_capture_is_refused_as_on_gaudi(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator.hpu import graphs
    from lightning_accel.habana_emulator.hpu.metrics import metric_localcontext

    x = torch.tensor([1, 2, 2, 5], device="hpu")
    with metric_localcontext("cpu_fallback") as local:
        with pytest.raises(RuntimeError, match=r"^cpu fallback is not supported during hpu graph capturing"):
            with graphs.graph(graphs.HPUGraph()):
                torch.bincount(x)
        assert not graphs.is_current_stream_capturing()
        # The bridge counts the operator before it refuses it (hpu_ops/cpu_fallback.cpp:93-105).
        assert _stats(local) == {"TotalNumber": 1, "FallbackOps": {"aten::bincount": 1}}
        g = graphs.HPUGraph()
        with graphs.graph(g):  # operators with Gaudi kernels capture as before
            y = x * 2
        g.replay()
    assert torch.equal(y.cpu(), torch.tensor([2, 4, 4, 10]))


_PLACE_ON_CPU_SCRIPT = """
import torch
import habana_frameworks.torch.core
x = torch.tensor([1.0, 2.0, 2.0, 5.0], device="hpu")
for name, call in (("histc", lambda: torch.histc(x, bins=4)), ("bincount", lambda: torch.bincount(x.long()))):
    try:
        call()
        print(name, "ran")
    except RuntimeError as error:
        print(name, "refused:", str(error).splitlines()[0])
"""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("aten::histc", ["histc ran", "bincount refused: aten::bincount is not yet supported on HPU."]),
        (
            "none",
            [
                "histc refused: aten::histc is not yet supported on HPU.",
                "bincount refused: aten::bincount is not yet supported on HPU.",
            ],
        ),
        ("", ["histc ran", "bincount ran"]),
    ],
)
def test_pt_hpu_place_on_cpu_allows_only_the_named_fallbacks(value: str, expected: list[str]) -> None:
    env = script_env(LIGHTNING_ACCEL_EMULATE="hpu", PT_HPU_PLACE_ON_CPU=value, PT_HPU_LAZY_MODE="0")
    done = subprocess.run([PYTHON, "-c", _PLACE_ON_CPU_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
