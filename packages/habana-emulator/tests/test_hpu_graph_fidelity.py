"""The emulated graph APIs accept and refuse what the SDK does, and cache and replay as it does.

Source: gaudi-pytorch-bridge 1.19.0, ``python_packages/habana_frameworks/torch/hpu/graphs.py`` (line numbers below),
and what changed there by bcc5172 (the SDK 1.24 period, section 7 on): ``make_graphed_callables`` asserts on hooks,
trainable buffers and non-tensor sample arguments (:238-252); ``ModuleCacher`` passes ``allow_unused_input`` through
(:1099, :987-989, :862-868) and asserts that ``forward`` has no ``*args`` (``process_function_signature``, :876-890);
``wrapped_hpugraph_forward`` captures whatever the grad mode, keeps the caller's inputs as the graph's and copies new
ones into them (:599-659); both caches key calls by ``input_hash``: shapes, view chains, autocast and, from the 1.24
period on, dtype and dataclass fields. In eager mode bcc5172 exports the graph APIs but ``HPUGraph()`` and
``graph(...)`` raise (``:49-51``, ``:188-189``); ``wrap_in_hpu_graph`` gained ``free_inplace``, ``verbose``,
``log_frequency``, ``dry_run=None`` and ``module.log_statistics``. Each test here failed against the emulator before
it followed these lines.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import re
import weakref
from typing import Any

import pytest
import torch

from lightning_accel.habana_emulator.hpu import graphs as hpu_graphs

pytestmark = pytest.mark.usefixtures("lazy_mode")


class Counting(torch.nn.Module):
    """A linear layer whose forward counts the times its Python runs (at capture and uncaptured, not at replay)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)
        self.bodies = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.bodies += 1
        return self.linear(x)


def _batches(count: int, rows: int = 2) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(rows, 4, generator=generator).to("hpu") for _ in range(count)]


# 1. make_graphed_callables raises the SDK's AssertionError, with its message.


def test_make_graphed_callables_refuses_a_module_with_hooks_as_the_sdk_asserts() -> None:
    module = Counting().to("hpu")
    module.register_forward_hook(lambda *_: None)
    with pytest.raises(AssertionError, match="Modules must not have hooks registered at the time they are passed"):
        hpu_graphs.make_graphed_callables(module, (torch.zeros(2, 4, device="hpu"),))


def test_make_graphed_callables_refuses_trainable_buffers_and_non_tensor_samples_as_the_sdk_asserts() -> None:
    module = Counting().to("hpu")
    module.register_buffer("scale", torch.ones(1, device="hpu", requires_grad=True))
    with pytest.raises(AssertionError, match="All buffers must have ``requires_grad=False``"):
        hpu_graphs.make_graphed_callables(module, (torch.zeros(2, 4, device="hpu"),))
    with pytest.raises(AssertionError, match="sample_args for each callable must be a tuple of Tensors"):
        hpu_graphs.make_graphed_callables(torch.tanh, (torch.zeros(2, device="hpu"), 3))


class _Outer(torch.nn.Module):
    """A child that records the module name the bridge would label its work with, in forward and in backward."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.seen: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from lightning_accel.habana_emulator import _module_names

        self.seen.append(_module_names.current_name())
        return self.inner(x)


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Outer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x).sum()


def test_in_lazy_mode_a_child_module_has_the_sdks_name_hooks_so_graphing_it_fails_as_on_gaudi() -> None:
    from lightning_accel.habana_emulator import _module_names

    model = _Model().to("hpu")  # made in lazy mode: the SDK's add_module/__setattr__ wrappers name each child
    assert (model.block.custom_name, model.block.inner.custom_name) == ("block", "inner")
    assert len(model.block._forward_pre_hooks) == len(model.block._forward_hooks) == 1
    assert not model._forward_hooks  # the root was never assigned as anyone's child
    x = torch.ones(2, 4, device="hpu", requires_grad=True)
    names: list[str] = []
    model.block.inner.weight.register_hook(lambda grad: names.append(_module_names.current_name()))
    model(x).backward()
    assert model.block.seen == ["block"]  # nested names: "block", then "block/inner" inside it
    assert names == ["gradient/block/inner"]  # the forward hook's gradient hook named the backward
    assert _module_names.current_name() == "gradient/block/inner"
    with pytest.raises(AssertionError, match="Modules must not have hooks registered at the time they are passed"):
        hpu_graphs.make_graphed_callables(model.block, (torch.ones(2, 4, device="hpu"),))
    hpu_graphs.make_graphed_callables(model, (torch.ones(2, 4, device="hpu"),))  # the root has none


def test_in_eager_mode_modules_get_no_name_hooks(eager_mode: None) -> None:
    model = _Model()
    assert not hasattr(model.block, "custom_name")
    assert not model.block._forward_hooks and not model.block._forward_pre_hooks


# 2. ModuleCacher: the caller's allow_unused_input, and no *args.


def test_module_cacher_refuses_a_forward_with_var_positional_arguments() -> None:
    class Star(torch.nn.Module):
        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return inputs[0] * 2

    with pytest.raises(AssertionError, match=r"Unsupported argument type : VAR_POSITIONAL.*`\*inputs`"):
        hpu_graphs.ModuleCacher(max_graphs=2)(model=Star(), inplace=True)


class WithUnused(Counting):
    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Parameter(torch.ones(3))


def test_module_cacher_keeps_allow_unused_input_false_by_default() -> None:
    model = hpu_graphs.ModuleCacher(max_graphs=2)(model=WithUnused().to("hpu"), inplace=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        model(torch.ones(2, 4, device="hpu"))


def test_module_cacher_passes_allow_unused_input_true_through() -> None:
    model = WithUnused().to("hpu")
    hpu_graphs.ModuleCacher(max_graphs=2)(model=model, inplace=True, allow_unused_input=True)
    model(torch.ones(2, 4, device="hpu")).sum().backward()
    assert model.unused.grad is not None
    torch.testing.assert_close(model.unused.grad.cpu(), torch.zeros(3))  # materialized as zeros, as the SDK


# 3. wrap_in_hpu_graph captures with gradients enabled; later calls return the captured outputs.


def test_wrap_in_hpu_graph_captures_with_grad_enabled_and_returns_the_captured_outputs() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu"))
    reference = Counting().to("hpu")
    first_batch, second_batch = _batches(2)
    first = module(first_batch)
    second = module(second_batch)
    assert module.bodies == 1  # the second call replayed the graph
    assert second is first and second.grad_fn is not None  # the captured outputs, with the capture's history
    torch.testing.assert_close(second.detach().cpu(), reference(second_batch).detach().cpu())


# 4. The caller's first-call inputs are the graph's inputs: later batches are copied into them.


def test_wrap_in_hpu_graph_copies_later_batches_into_the_first_calls_tensors() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    batches = _batches(3)
    originals = [b.clone() for b in batches]
    with torch.no_grad():
        for batch in batches:
            module(batch)
    # A step that kept batch 0 sees the last batch, as on Gaudi; the later batches are untouched.
    torch.testing.assert_close(batches[0].cpu(), originals[2].cpu())
    torch.testing.assert_close(batches[1].cpu(), originals[1].cpu())


def test_module_cacher_copies_later_batches_into_the_first_calls_tensors() -> None:
    model = hpu_graphs.ModuleCacher(max_graphs=2)(model=Counting().to("hpu"), inplace=True)
    batches = _batches(3)
    originals = [b.clone() for b in batches]
    for batch in batches:
        model(batch).sum().backward()
    assert model.bodies == 1
    torch.testing.assert_close(batches[0].cpu(), originals[2].cpu())


# 5. The key: dtype, shape, view chain and autocast state (dtype from the 1.24 period on); not device or
# requires_grad.


class Casting(Counting):
    """Takes inputs of any floating dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float())


def test_wrap_in_hpu_graph_keys_by_dtype_shape_and_autocast_not_requires_grad() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Casting().to("hpu").eval())
    with torch.no_grad():
        module(torch.ones(2, 4, device="hpu"))
        module(torch.ones(2, 4, device="hpu", requires_grad=True))  # the same key: replayed
        assert module.bodies == 1
        # Another dtype of the same shape is another key (bridge 1.19.0 replayed the first graph, casting the input).
        double = torch.full((2, 4), 2.0, device="hpu", dtype=torch.float64)
        out = module(double)
        assert module.bodies == 2
        torch.testing.assert_close(out.cpu(), Casting()(double.cpu()))
        with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
            module(torch.ones(2, 4, device="hpu"))  # autocast on: another key
        assert module.bodies == 3
        module(torch.ones(3, 4, device="hpu"))  # another shape: another key
        assert module.bodies == 4


def test_module_cacher_keys_by_dtype_and_shape() -> None:
    model = hpu_graphs.ModuleCacher(max_graphs=4)(model=Casting().to("hpu"), inplace=True)
    model(torch.ones(2, 4, device="hpu")).sum().backward()
    model(torch.zeros(2, 4, device="hpu")).sum().backward()
    assert model.bodies == 1
    model(torch.ones(2, 4, device="hpu", dtype=torch.float64)).sum().backward()
    assert model.bodies == 2
    model(torch.ones(5, 4, device="hpu")).sum().backward()
    assert model.bodies == 3


def test_module_cacher_gives_the_first_micro_step_of_an_accumulation_graphs_of_its_own() -> None:
    # graphs.py:1001-1007: with have_grad_accumulation, forward_cnt == 0 (set by set_iteration_count) is another key.
    model = Counting().to("hpu")
    hpu_graphs.ModuleCacher(max_graphs=4)(model=model, inplace=True, have_grad_accumulation=True)
    reference = Counting().to("hpu")
    for step, batch in enumerate(_batches(4)):
        model.set_iteration_count(step % 2)
        if step % 2 == 0:
            model.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
        model(batch.clone()).sum().backward()
        reference(batch.clone()).sum().backward()
        torch.testing.assert_close(model.linear.weight.grad.cpu(), reference.linear.weight.grad.cpu())
    assert model.bodies == 2  # one capture for the first micro-step, one for the others


# 6. What ModuleCacher sets on the module, and its LFU mode (graphs.py:1043-1104).


def test_module_cacher_sets_the_sdks_methods_on_the_module_and_says_when_it_captures() -> None:
    seen: list[bool] = []

    class Asking(Counting):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(self.is_hpugraph_tracing())  # type: ignore[operator]
            return super().forward(x)

    model = hpu_graphs.ModuleCacher(max_graphs=1)(model=Asking().to("hpu"), inplace=True)
    for name in ("orig_forward", "set_iteration_count", "is_hpugraph_tracing", "capture_start", "capture_end"):
        assert callable(model.__dict__[name]), name
    model(torch.ones(2, 4, device="hpu")).sum().backward()  # captured
    model(torch.ones(3, 4, device="hpu")).sum().backward()  # max_graphs reached: run uncaptured
    assert seen == [True, False]


def test_module_cacher_with_use_lfu_graphs_the_keys_counted_most_often_between_capture_start_and_end() -> None:
    model = Counting().to("hpu")
    cacher = hpu_graphs.ModuleCacher(max_graphs=1)
    cacher(model=model, inplace=True, use_lfu=True)
    rare, frequent = torch.ones(2, 4, device="hpu"), torch.ones(3, 4, device="hpu")
    model.capture_start()
    for batch in (rare, frequent, frequent):
        model(batch).sum().backward()  # counted, run uncaptured
    model.capture_end()
    assert model.bodies == 3 and cacher.model_dict == {} and cacher.uncached_train_hits == 3
    model(rare).sum().backward()  # not a priority key: uncaptured
    for _ in range(3):
        model(frequent).sum().backward()  # captured once, then replayed
    assert model.bodies == 3 + 1 + 1
    assert len(cacher.model_dict) == 1 and cacher.uncached_train_hits == 4


# 7. Eager mode (bcc5172): the graph APIs are exported, and creating a graph raises the SDK's RuntimeError.

_LAZY_ONLY = r"is available in lazy mode only, and the SDK runs in eager mode .*PT_HPU_LAZY_MODE=1"


def test_in_eager_mode_the_graph_apis_are_exported_and_creating_a_graph_raises(eager_mode: None) -> None:
    import habana_frameworks.torch.hpu as hpu

    for name in ("HPUGraph", "graph", "make_graphed_callables", "ModuleCacher", "wrap_in_hpu_graph", "log_stats"):
        assert getattr(hpu, name) is getattr(hpu_graphs, name), name
    star: dict[str, Any] = {}
    exec("from habana_frameworks.torch.hpu import *", star)  # the SDK's hpu has no __all__: every public name
    assert {"HPUGraph", "wrap_in_hpu_graph", "input_hash", "is_any_cpu_float_bfloat_0d_tensors"} <= star.keys()
    with pytest.raises(RuntimeError, match="HPUGraph " + _LAZY_ONLY):
        hpu.HPUGraph()
    with pytest.raises(RuntimeError, match=r"capture context manager \(hpu.graph\) " + _LAZY_ONLY):
        hpu.graph(object())


def test_in_eager_mode_make_graphed_callables_asserts_then_refuses_before_any_warmup(eager_mode: None) -> None:
    calls: list[int] = []

    def func(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x * 2

    hooked = Counting()
    hooked.register_forward_hook(lambda *_: None)
    with pytest.raises(AssertionError, match="Modules must not have hooks"):  # the SDK's assertions come first
        hpu_graphs.make_graphed_callables(hooked, (torch.zeros(2, 4, device="hpu"),))
    with pytest.raises(RuntimeError, match=_LAZY_ONLY):
        hpu_graphs.make_graphed_callables(func, (torch.zeros(2, device="hpu", requires_grad=True),), warmups=2)
    assert calls == []  # the SDK creates its graphs before the warm-ups


def test_in_eager_mode_wrap_in_hpu_graph_fails_at_its_first_capture_and_module_cacher_runs_eagerly(
    eager_mode: None,
) -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())  # wrapping creates no graph
    with torch.no_grad():
        bypassed = module(torch.ones(2, 4, device="hpu"), bypass_hpu_graphs=True)
        assert bypassed.shape == (2, 3) and module.bodies == 1
        with pytest.raises(RuntimeError, match="HPUGraph " + _LAZY_ONLY):
            module(torch.ones(2, 4, device="hpu"))
    # The SDK's ModuleCacher graphs only in lazy mode: in eager mode every call runs the forward, and nothing raises.
    cacher = hpu_graphs.ModuleCacher(max_graphs=2)
    model = cacher(model=Counting().to("hpu"), inplace=True)
    for _ in range(2):
        model(torch.ones(2, 4, device="hpu")).sum().backward()
    assert model.bodies == 2 and cacher.model_dict == {} and cacher.uncached_train_hits == 2


# 8. Dataclass inputs are keyed by their fields (bcc5172 input_hash), and refilled field by field (copy_to).


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    scale: float


class TakesBatch(Counting):
    def forward(self, batch: Batch) -> torch.Tensor:  # type: ignore[override]
        return super().forward(batch.x) * batch.scale


def test_wrap_in_hpu_graph_keys_a_dataclass_input_by_its_fields_and_copies_them_in() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(TakesBatch().to("hpu").eval())
    reference = Counting().eval()
    first, second = _batches(2)
    with torch.no_grad():
        module(Batch(first, 1.0))
        out = module(Batch(second, 1.0))  # the same fields' key: replayed on the copied-in tensor
        assert module.bodies == 1
        torch.testing.assert_close(out.cpu(), reference(second.cpu()))
        module(Batch(second, 0.5))  # another value of a field: another key
        module(Batch(torch.ones(3, 4, device="hpu"), 1.0))  # another shape inside: another key
    assert module.bodies == 3


# 9. wrap_in_hpu_graph's 1.24 parameters: verbose, log_frequency, dry_run=None, free_inplace; log_statistics.


def _printouts(text: str) -> int:
    return text.count("HPU Graph Inference Statistics")


def test_wrap_in_hpu_graph_prints_its_statistics_every_log_frequency_calls_with_verbose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    quiet = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    chatty = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval(), verbose=True, log_frequency=3)
    never = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval(), verbose=True, log_frequency=0)
    x = torch.ones(2, 4, device="hpu")
    with torch.no_grad():
        for _ in range(6):
            quiet(x)
            never(x)
        capsys.readouterr()
        for _ in range(6):  # the SDK counts the calls of every wrapped forward of the process: 6 in a row hit 2 of 3
            chatty(x)
    printed = capsys.readouterr().out
    assert _printouts(printed) == 2
    assert re.search(r"Max graphs +:- None\n", printed) and re.search(r"No\. of HPUGraphs cached +:- 1\n", printed)
    assert "Memory Statistics (Device ID)" in printed and "InUse" in printed  # the memory part


def test_log_statistics_prints_the_resolved_settings_of_the_module(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval(), disable_tensor_cache=True, max_graphs=3)
    module.log_statistics()  # nothing cached yet: only the bypassed calls and the memory
    printed = capsys.readouterr().out
    assert _printouts(printed) == 0 and "Bypassed HPUGraphs info" in printed
    with torch.no_grad():
        module(torch.ones(2, 4, device="hpu"))
    module.log_statistics()
    printed = capsys.readouterr().out
    # dry_run=None (the 1.24 default) follows disable_tensor_cache.
    assert re.search(r"Disable Tensor Cache +:- True\n", printed) and re.search(r"Dry Run +:- True\n", printed)
    assert re.search(r"Max graphs +:- 3\n", printed)
    # The SDK reads PT_HPUGRAPH_DISABLE_TENSOR_CACHE at each call, over the argument.
    monkeypatch.setenv("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", "0")
    module.log_statistics()
    printed = capsys.readouterr().out
    assert re.search(r"Disable Tensor Cache +:- False\n", printed) and re.search(r"Dry Run +:- False\n", printed)
    monkeypatch.setenv("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", "true")  # the SDK would read it as "0"
    with pytest.raises(ValueError, match=r"PT_HPUGRAPH_DISABLE_TENSOR_CACHE='true' is not accepted. Accepted: '1'"):
        with torch.no_grad():
            module(torch.ones(2, 4, device="hpu"))


def test_the_statistics_count_replays_warmups_and_bypassed_calls(capsys: pytest.CaptureFixture[str]) -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    x = torch.ones(7, 4, device="hpu")  # a shape no other test uses: its key's count starts here

    def total(label: str) -> int:
        module.log_statistics()
        found = re.search(rf"{label} +:- (\d+)\n", capsys.readouterr().out)
        assert found is not None
        return int(found.group(1))

    with torch.no_grad():
        module(x)
        hits, warmups, bypassed = (
            total("Total cached hits"),
            total("Total HPUGraph warmups"),
            total("Total HPUGraphs bypassed"),
        )
        module(x)
        module(x, warmup_mode=True)
        module(x, bypass_hpu_graphs=True)
    assert total("Total cached hits") == hits + 1
    assert total("Total HPUGraph warmups") == warmups + 1
    assert total("Total HPUGraphs bypassed") == bypassed + 1


def test_wrap_in_hpu_graph_refuses_parameters_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"wrap_in_hpu_graph\(verbose='yes'\) is not accepted. Accepted: True or False"):
        hpu_graphs.wrap_in_hpu_graph(Counting(), verbose="yes")
    with pytest.raises(TypeError, match=r"wrap_in_hpu_graph\(dry_run='auto'\) is not accepted. Accepted: None"):
        hpu_graphs.wrap_in_hpu_graph(Counting(), dry_run="auto")
    with pytest.raises(
        TypeError, match=r"wrap_in_hpu_graph_func\(log_frequency='10'\) is not accepted. Accepted: an int"
    ):
        hpu_graphs.wrap_in_hpu_graph_func(torch.tanh, log_frequency="10")
    with pytest.raises(TypeError, match=r"wrap_in_hpu_graph_func\(free_inplace=None\)"):
        hpu_graphs.wrap_in_hpu_graph_func(torch.tanh, free_inplace=None)


def test_the_1_24_parameters_leave_the_results_alone() -> None:
    # disable_tensor_cache, dry_run and free_inplace change what Gaudi keeps in memory, not what a call returns.
    plain = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    tuned = hpu_graphs.wrap_in_hpu_graph(
        Counting().to("hpu").eval(), disable_tensor_cache=True, dry_run=None, free_inplace=False, asynchronous=True
    )
    with torch.no_grad():
        for batch in _batches(3):
            torch.testing.assert_close(tuned(batch).cpu(), plain(batch).cpu())
    assert tuned.bodies == plain.bodies == 1


def test_a_cpu_scalar_input_is_read_at_every_replay() -> None:
    # The SDK passes 0-d float CPU tensors (scales) to the replay (is_any_cpu_float_bfloat_0d_tensors): a graph
    # follows their new values. The emulated graph reads its captured scalar, which each call refills.
    class Scaled(Counting):
        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return super().forward(x) * scale

    module = hpu_graphs.wrap_in_hpu_graph(Scaled().to("hpu").eval())
    reference = Counting().eval()
    x = torch.ones(2, 4, device="hpu")
    assert hpu_graphs.is_any_cpu_float_bfloat_0d_tensors(
        hpu_graphs.get_user_input_tensor_list((x, torch.tensor(2.0)), ())
    )
    with torch.no_grad():
        for value in (1.0, 3.0, -0.5):
            out = module(x, torch.tensor(value))
            torch.testing.assert_close(out.cpu(), reference(x.cpu()) * value)
    assert module.bodies == 1


def test_wrap_in_hpu_graph_sets_log_statistics_and_its_helpers_hold_the_graphs() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    with torch.no_grad():
        module(torch.ones(2, 4, device="hpu"))
    for name in ("forward", "clear_cache", "clear_inputs", "log_statistics"):
        assert callable(module.__dict__[name]), name
    captured = weakref.ref(next(iter(module.clear_cache.__self__.values())))  # the cache's graph entry
    for name in ("forward", "clear_inputs", "log_statistics"):
        del module.__dict__[name]
    gc.collect()
    assert captured() is not None  # clear_cache still holds the cache
    del module.__dict__["clear_cache"]
    gc.collect()
    assert captured() is None


def test_module_cacher_prints_its_statistics_with_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    cacher = hpu_graphs.ModuleCacher(max_graphs=2)
    model = cacher(model=Counting().to("hpu"), inplace=True, verbose=True, log_frequency=2)
    for _ in range(3):  # the forwards numbered 0, 1, 2: printed before the 1st and the 3rd
        model(torch.ones(2, 4, device="hpu")).sum().backward()
    printed = capsys.readouterr().out
    assert printed.count("HPU Graph Statistics") == 2
    # Before the third forward: the capture and the replay each counted a hit, as the SDK's cache_insert replays.
    assert re.search(r"Total cached hits +:- 2\n", printed)
    model.capture_start()
    model.capture_end()
    assert capsys.readouterr().out.count("HPU Graph Statistics") == 1
    with pytest.raises(TypeError, match=r"log_frequency=0\) is not accepted with verbose=True"):
        hpu_graphs.ModuleCacher()(model=Counting(), verbose=True, log_frequency=0)


# 10. HPUGraph: replay_with_inputs (1.24), dry runs and the marked-input replays refused by name.


def test_replay_with_inputs_replays_and_the_marked_input_replays_refuse_by_name() -> None:
    static = torch.ones(3, device="hpu")
    g = hpu_graphs.HPUGraph()
    with hpu_graphs.graph(g):
        out = static * 2
    static.fill_(4.0)
    g.replay_with_inputs()
    assert out.cpu().tolist() == [8.0] * 3
    static.fill_(5.0)
    g.replay_with_inputs([static])  # no marked inputs on the emulated graph: the tensors replace nothing
    assert out.cpu().tolist() == [10.0] * 3
    with pytest.raises(
        TypeError, match=r"replay_with_inputs\(tlistI=\.\.\.\) needs None or a list of tensors, got list"
    ):
        g.replay_with_inputs([1.0])
    for call in (
        lambda: g.replayV3([static]),
        lambda: g.replayV2([static], [static]),
        lambda: g.mark_user_outputs([out]),
        lambda: g.get_user_input_match_indices(),
    ):
        with pytest.raises(NotImplementedError, match=r"hpu\.graphs\.HPUGraph\.\w+ is not emulated: the SDK's replay"):
            call()
    with pytest.raises(NotImplementedError, match=r"HPUGraph\.mark_user_inputs is not emulated"):
        g.mark_user_inputs([static])


def test_a_dry_run_capture_is_refused_rather_than_executed() -> None:
    weight = torch.ones(2, device="hpu")
    g = hpu_graphs.HPUGraph()
    with pytest.raises(NotImplementedError, match=r"capture_begin\(dry_run=True\) is not emulated: a dry-run capture"):
        with hpu_graphs.graph(g, dry_run=True):
            weight.add_(1.0)
    assert weight.cpu().tolist() == [1.0, 1.0]  # refused before anything ran
    with pytest.raises(TypeError, match=r"capture_begin\(dry_run='no'\) is not accepted"):
        g.capture_begin(dry_run="no")


# 11. make_graphed_callables(dry_run=True): the capture's in-place updates happen at the replays only.


@pytest.mark.parametrize(("options", "updates"), [({}, 4), ({"dry_run": True}, 3), ({"disable_tensor_cache": True}, 3)])
def test_make_graphed_callables_dry_run_leaves_the_running_statistics_to_the_replays(
    options: dict[str, Any], updates: int
) -> None:
    norm = torch.nn.BatchNorm1d(4).to("hpu")
    graphed = hpu_graphs.make_graphed_callables(norm, (torch.randn(8, 4, device="hpu", requires_grad=True),), **options)
    for batch in _batches(3, rows=8):
        graphed(batch.requires_grad_()).sum().backward()
    # Without a dry run the capture updated them once more, as on Gaudi.
    assert norm.num_batches_tracked.item() == updates


def test_input_hash_of_a_user_dict_hashes_each_values_elements() -> None:
    x = torch.ones(2, 3, device="hpu")
    same = hpu_graphs.input_hash(collections.UserDict(ids=x))
    assert same == hpu_graphs.input_hash(collections.UserDict(ids=torch.zeros(2, 3, device="hpu")))
    assert same != hpu_graphs.input_hash(collections.UserDict(ids=x.double()))
    with pytest.raises(TypeError, match=r"the UserDict value at key 'n' \(int\) cannot be iterated"):
        hpu_graphs.input_hash(collections.UserDict(n=3))
