"""The emulated graph APIs accept and refuse what the SDK does, and cache and replay as it does.

Source: gaudi-pytorch-bridge 1.19.0, ``python_packages/habana_frameworks/torch/hpu/graphs.py``:
``make_graphed_callables`` asserts on hooks, trainable buffers and non-tensor sample arguments (:238-252);
``ModuleCacher`` passes ``allow_unused_input`` through (:1099, :987-989, :862-868) and asserts that ``forward`` has no
``*args`` (``process_function_signature``, :876-890); ``wrapped_hpugraph_forward`` captures whatever the grad mode,
keeps the caller's inputs as the graph's and copies new ones into them (:599-659); both caches key calls by
``input_hash`` (:488-499): shapes, view chains, autocast, not dtype. Each test here failed against the emulator before
it followed these lines.
"""

from __future__ import annotations

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


# 5. The key: shape, view chain and autocast state; not dtype, device or requires_grad.


def test_wrap_in_hpu_graph_keys_by_shape_and_autocast_not_dtype_or_requires_grad() -> None:
    module = hpu_graphs.wrap_in_hpu_graph(Counting().to("hpu").eval())
    with torch.no_grad():
        module(torch.ones(2, 4, device="hpu"))
        # Another dtype, or requires_grad, of the same shape: the SDK replays the first graph, casting the input.
        out = module(torch.full((2, 4), 2.0, device="hpu", dtype=torch.float64))
        module(torch.ones(2, 4, device="hpu", requires_grad=True))
        assert module.bodies == 1 and out.dtype == torch.float32
        with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
            module(torch.ones(2, 4, device="hpu"))  # autocast on: another key
        assert module.bodies == 2
        module(torch.ones(3, 4, device="hpu"))  # another shape: another key
        assert module.bodies == 3


def test_module_cacher_keys_by_shape_not_dtype() -> None:
    model = hpu_graphs.ModuleCacher(max_graphs=4)(model=Counting().to("hpu"), inplace=True)
    model(torch.ones(2, 4, device="hpu")).sum().backward()
    model(torch.ones(2, 4, device="hpu", dtype=torch.float64)).sum().backward()
    assert model.bodies == 1
    model(torch.ones(5, 4, device="hpu")).sum().backward()
    assert model.bodies == 2


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
