"""The rest of the SDK's ``hpu.graphs``: ``wrap_in_hpu_graph_func``, the graph keywords, and the helpers over inputs.

Source: gaudi-pytorch-bridge 1.19.0, ``python_packages/habana_frameworks/torch/hpu/graphs.py``:
``wrap_in_hpu_graph_func`` (:662-699) is ``wrap_in_hpu_graph``'s cache for a function; ``wrapped_hpugraph_forward``
(:553-659) pops ``warmup_mode``, ``bypass_hpu_graphs`` and ``cache_tensors_list``; ``input_hash``, ``copy_to``,
``get_user_input_tensor_list``, ``extract_tensors``, ``get_tensor_info`` and ``stringify`` (:35-39, :488-550). What
the SDK 1.24 period changed (bcc5172, the same file): ``input_hash`` keys on dtype and dataclass fields, the helpers
walk dataclasses, and ``is_any_cpu_float_bfloat_0d_tensors`` and ``log_stats`` are new. A captured graph replays
without running the Python, so a counter in the function tells captures from replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from lightning_accel.habana.sdk import htcore

# HPU graphs are created in lazy mode only (PT_HPU_LAZY_MODE=1); SDK 1.24 exports the names in eager mode too.
pytestmark = pytest.mark.usefixtures("lazy_mode")


class Counted:
    """A function of one tensor that counts how often its Python runs (at capture and uncaptured, not at replay)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.bodies = 0

    def __call__(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        self.bodies += 1
        return torch.tanh(x @ self.weight) * scale


def _weight(requires_grad: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=generator).to("hpu").requires_grad_(requires_grad)


def test_wrap_in_hpu_graph_func_captures_each_signature_once_and_replays_it() -> None:
    func = Counted(_weight())
    graphed = htcore.hpu.wrap_in_hpu_graph_func(func, max_graphs=2)
    assert graphed is not func and func.bodies == 0
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        outputs = []
        for rows, scale in ((2, 1.0), (3, 1.0), (2, 1.0), (2, 0.5), (3, 1.0)):  # (2, 0.5): a third signature
            x = torch.randn(rows, 8, generator=generator).to("hpu")
            out = graphed(x, scale=scale)
            torch.testing.assert_close(out.cpu(), (torch.tanh(x @ func.weight) * scale).cpu())
            outputs.append(out)
    # Two captures, one uncaptured call beyond max_graphs; the repeats replayed into the captured outputs.
    assert func.bodies == 3
    assert outputs[2] is outputs[0] and outputs[4] is outputs[1] and outputs[3] is not outputs[0]


def test_wrap_in_hpu_graph_func_refuses_what_is_not_a_plain_callable() -> None:
    with pytest.raises(TypeError, match=r"wrap_in_hpu_graph_func\(func=\.\.\.\) needs a callable, got int"):
        htcore.hpu.wrap_in_hpu_graph_func(3)
    with pytest.raises(ValueError, match=r"wrap_in_hpu_graph_func\(max_graphs=0\) is not accepted"):
        htcore.hpu.wrap_in_hpu_graph_func(torch.tanh, max_graphs=0)


def test_a_graphed_function_over_trainable_tensors_replays_the_captured_autograd_history() -> None:
    # As the SDK's wrapped_hpugraph_forward (:599-659): the first call is captured with gradients enabled, and later
    # calls return the captured outputs, whose autograd history is the capture's; it is an inference API.
    func, reference = Counted(_weight(requires_grad=True)), Counted(_weight(requires_grad=True))
    graphed = htcore.hpu.wrap_in_hpu_graph_func(func)
    x0, x1 = torch.randn(4, 8).to("hpu"), torch.randn(4, 8).to("hpu")
    first = graphed(x0)
    first.sum().backward()
    reference(x0).sum().backward()
    torch.testing.assert_close(func.weight.grad.cpu(), reference.weight.grad.cpu())
    second = graphed(x1)
    assert second is first and second.grad_fn is not None and func.bodies == 1
    torch.testing.assert_close(second.detach().cpu(), reference(x1).detach().cpu())  # the replay refreshed it
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        second.sum().backward()


def test_warmup_mode_returns_the_captured_outputs_without_replaying() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[dict[str, Any]] = []

        def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            self.seen.append(kwargs)
            return x * 2

    net = htcore.hpu.wrap_in_hpu_graph(Net().eval())
    with torch.no_grad():
        # cache_tensors_list is part of the key (the SDK hashes the inputs before it pops it, graphs.py:589-592).
        keep = [torch.ones(1)]
        first = net(torch.ones(3, device="hpu"), cache_tensors_list=keep)
        warm = net(torch.full((3,), 5.0, device="hpu"), warmup_mode=True, cache_tensors_list=keep)
        # The warm-up call neither ran the forward nor replayed the graph: the outputs still hold the capture's.
        assert warm is first and net.seen == [{}]
        torch.testing.assert_close(warm.cpu(), torch.full((3,), 2.0))
        replayed = net(torch.full((3,), 5.0, device="hpu"), cache_tensors_list=keep)
        torch.testing.assert_close(replayed.cpu(), torch.full((3,), 10.0))
        bypassed = net(torch.ones(3, device="hpu"), bypass_hpu_graphs=True)
    assert bypassed is not first and net.seen == [{}, {}]


def test_input_hash_tells_signatures_apart_not_values() -> None:
    input_hash = htcore.hpu.input_hash
    x = torch.randn(4, 6, device="hpu")
    assert input_hash((x, {"n": 2})) == input_hash((torch.zeros(4, 6, device="hpu"), {"n": 2}))
    assert input_hash((x, {"n": 2})) != input_hash((x, {"n": 3}))
    assert input_hash([x]) != input_hash([torch.zeros(4, 5, device="hpu")])
    # A view is hashed with its layout over the base, a fresh tensor of the same shape without one.
    assert input_hash(x[:, :3]) != input_hash(torch.zeros(4, 3, device="hpu"))
    with torch.autocast("hpu", dtype=torch.bfloat16):
        under_autocast = input_hash((x,))
    assert under_autocast != input_hash((x,))
    with pytest.raises(TypeError, match="unhashable"):
        input_hash(({1},))


@pytest.mark.emulator_only  # the 1.24 period's input_hash (bcc5172); the public 1.23 source, if any, is not known
def test_input_hash_of_the_1_24_period_keys_on_dtype_and_dataclass_fields() -> None:
    @dataclass
    class Inputs:
        ids: torch.Tensor
        length: int

    input_hash = htcore.hpu.input_hash
    x = torch.randn(4, 6, device="hpu")
    assert input_hash((x,)) != input_hash((x.to(torch.bfloat16),))
    assert input_hash(Inputs(x, 3)) == input_hash(Inputs(torch.zeros(4, 6, device="hpu"), 3))
    assert input_hash(Inputs(x, 3)) != input_hash(Inputs(x, 4))
    assert input_hash(Inputs(x, 3)) != input_hash(Inputs(x[:2], 3))


def test_copy_to_fills_captured_inputs_in_place() -> None:
    static = ({"x": torch.zeros(2, device="hpu"), "n": 1}, [torch.zeros(3, device="hpu")])
    first = static[0]["x"]
    htcore.hpu.copy_to(static, ({"x": torch.ones(2, device="hpu"), "n": 7}, [torch.arange(3.0, device="hpu")]))
    assert static[0]["x"] is first and static[0]["n"] == 1  # tensors are written into; other values stay
    torch.testing.assert_close(first.cpu(), torch.ones(2))
    torch.testing.assert_close(static[1][0].cpu(), torch.arange(3.0))


@pytest.mark.emulator_only  # the 1.24 period's helpers (bcc5172); the public 1.23 source, if any, is not known
def test_the_helpers_of_the_1_24_period_walk_dataclasses_and_find_cpu_scalars() -> None:
    @dataclass
    class Inputs:
        ids: torch.Tensor
        scale: torch.Tensor
        name: str

    static = Inputs(torch.zeros(3, device="hpu"), torch.tensor(1.0), "a")
    htcore.hpu.copy_to(static, Inputs(torch.arange(3.0, device="hpu"), torch.tensor(0.5), "b"))
    assert static.ids.cpu().tolist() == [0.0, 1.0, 2.0] and static.scale.item() == 0.5 and static.name == "a"
    found = htcore.hpu.get_user_input_tensor_list(((static,), {}), ())
    assert [t is u for t, u in zip(found, (static.ids, static.scale), strict=True)] == [True, True]
    # A 0-d float32 or bfloat16 CPU tensor (a scale): the SDK hands such inputs to the replay.
    is_scalar_input = htcore.hpu.is_any_cpu_float_bfloat_0d_tensors
    assert is_scalar_input(found) and is_scalar_input([torch.tensor(1.0, dtype=torch.bfloat16)])
    assert not is_scalar_input(
        [static.ids, torch.tensor(1), torch.tensor(1.0, dtype=torch.float64), torch.ones(1), 2.0]
    )


@pytest.mark.emulator_only
def test_copy_to_names_a_structure_mismatch() -> None:
    # The SDK asserts equal types and zips the rest (a partial copy); the emulator says what differs.
    with pytest.raises(TypeError, match=r"copy_to\(dst=\.\.\., src=\.\.\.\) needs the same structure .* dst is a list"):
        htcore.hpu.copy_to([torch.zeros(1)], (torch.zeros(1),))
    with pytest.raises(ValueError, match=r"same keys in the same order: dst has \['a'\], src \['b'\]"):
        htcore.hpu.copy_to({"a": torch.zeros(1)}, {"b": torch.zeros(1)})
    with pytest.raises(ValueError, match="sequences of the same length: dst has 1, src 2"):
        htcore.hpu.copy_to([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)])


def test_the_tensor_collectors_find_every_tensor_in_order() -> None:
    @dataclass
    class Output:
        logits: torch.Tensor
        extra: Any

    a, b, c = (torch.full((1,), float(i), device="hpu") for i in range(3))
    inputs = ((a, "text"), {"b": b, "n": 3}, [c])
    found = htcore.hpu.get_user_input_tensor_list(inputs, (c,))
    assert [t.item() for t in found] == [2.0, 0.0, 1.0, 2.0]
    output = Output(a, {"hidden": [b, 4], "c": c})
    output.extra["self"] = output  # an object that refers back to itself
    assert [t.item() for t in htcore.hpu.extract_tensors([output])] == [0.0, 1.0, 2.0]
    info = htcore.hpu.get_tensor_info(torch.zeros(2, 3, dtype=torch.bfloat16, device="hpu"))
    assert info == {"shape": torch.Size([2, 3]), "dtype": torch.bfloat16, "device": torch.device("hpu", 0)}
    assert htcore.hpu.stringify("warmups", 2, None) == " warmups 2 None"


def test_the_graphs_module_has_the_sdks_core_module() -> None:
    assert htcore.hpu.htcore is htcore


@pytest.mark.emulator_only
def test_the_internals_of_the_sdks_graph_caches_refuse_by_name() -> None:
    for name in ("CachedParams", "GraphModel", "TensorPacker", "wrapped_hpugraph_forward", "hpu_graph_print"):
        with pytest.raises(NotImplementedError, match=rf"torch[.]hpu[.]graphs[.]{name} is not emulated: "):
            getattr(htcore.hpu, name)()
