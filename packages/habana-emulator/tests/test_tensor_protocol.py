"""The tensor protocol of a torch device, held by ``"hpu"``: each test runs the same code on ``"cpu"`` and ``"hpu"``.

A library that works on any torch device relies on more than operators: copies (``copy.deepcopy``, ``pickle``,
``torch.save``), ``.data``, views, hooks, activation checkpointing, ``torch.func``, ``AveragedModel``, generators,
asynchronous copies, pinned-memory data loading and parametrizations. Each test below runs one of them on both
devices and compares what a user sees: values, shapes, classes, devices, sharing, gradients. Data is drawn on the
host and moved, since a Gaudi's generator draws other numbers than the CPU's; only the test marked ``emulator_only``
relies on the emulator drawing from the backing device's generator.
"""

from __future__ import annotations

import copy
import importlib
import io
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

DEVICES = ("cpu", "hpu")


@pytest.fixture(scope="module", autouse=True)
def _sdk_loaded() -> Iterator[None]:
    importlib.import_module("habana_frameworks.torch.core")  # loading the (emulated) SDK makes "hpu" a torch device
    yield


def _host(value: Any) -> Any:
    return pytree.tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, value)


def _on_both(run: Callable[[str], Any]) -> tuple[Any, Any]:
    """``run("cpu")`` and ``run("hpu")``, each with the same seed."""
    results = []
    for device in DEVICES:
        torch.manual_seed(0)
        results.append(run(device))
    return results[0], results[1]


def _assert_same(run: Callable[[str], Any]) -> Any:
    """``run`` gives the same values (and tensors on its own device) on ``"cpu"`` and ``"hpu"``; returns the hpu's."""
    on_cpu, on_hpu = _on_both(run)
    for tensor in pytree.tree_leaves(on_hpu):
        if isinstance(tensor, torch.Tensor):
            assert tensor.device.type == "hpu", tensor.device
    torch.testing.assert_close(_host(on_hpu), on_cpu)
    return on_hpu


def _mlp(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)


# --- copies ----------------------------------------------------------------------------------------------------------


def test_deepcopy_of_tensors_parameters_and_modules() -> None:
    model = torch.nn.Linear(16, 32).to("hpu")
    copied = copy.deepcopy(model)
    assert copied.weight.shape == (32, 16) and copied.bias.shape == (32,)
    assert isinstance(copied.weight, torch.nn.Parameter) and copied.weight.requires_grad
    assert copied.weight.device.type == "hpu" and copied.weight is not model.weight
    torch.testing.assert_close(copied.weight.cpu(), model.weight.cpu())
    with torch.no_grad():
        copied.weight.add_(1)  # a copy, not a view of the original
    assert not torch.equal(copied.weight.cpu(), model.weight.cpu())

    def run(device: str) -> Any:
        base = torch.randn(4, 5).to(device).requires_grad_()
        base.grad = torch.ones(4, 5, device=device)
        frozen = torch.nn.Parameter(torch.randn(3).to(device), requires_grad=False)
        view = base.detach()[1:3, ::2]
        a, b, c, p = copy.deepcopy([base, view, frozen, frozen])
        assert p is c and type(c) is type(frozen) and not c.requires_grad
        assert a.requires_grad and a.is_leaf and a.grad is not None
        with torch.no_grad():
            a.zero_()  # the copied view shares the copied base's storage, as the originals did
        return a, b, c, a.grad, b.stride(), b.storage_offset()

    _assert_same(run)


def test_pickle_and_torch_save_round_trips() -> None:
    def run(device: str) -> Any:
        base = torch.randn(6).to(device)
        state = {"base": base, "view": base[2:5], "weight": torch.nn.Parameter(torch.randn(2, 2).to(device))}
        unpickled = pickle.loads(pickle.dumps(state))
        loaded = []
        for map_location in (None, device, "cpu"):
            buffer = io.BytesIO()
            torch.save(state, buffer)
            buffer.seek(0)
            loaded.append(torch.load(buffer, map_location=map_location))
        for restored, where in zip([unpickled, *loaded], [device, device, device, "cpu"], strict=True):
            assert all(t.device.type == where for t in restored.values())
            assert isinstance(restored["weight"], torch.nn.Parameter) and restored["weight"].requires_grad
            restored["base"].add_(1)  # torch.save keeps a view with its base (pickle copies each tensor apart)
        return [[r["base"].cpu(), r["view"].cpu(), r["weight"].cpu()] for r in (unpickled, *loaded)]

    on_cpu, on_hpu = _on_both(run)
    torch.testing.assert_close(on_hpu, on_cpu)
    for base, view, _ in on_hpu[1:]:
        assert torch.equal(view, base[2:5])


# --- .data, views, requires_grad_ ----------------------------------------------------------------------------------


def test_data_reads_and_swaps() -> None:
    def run(device: str) -> Any:
        param = torch.nn.Parameter(torch.zeros(3, device=device))
        alias = param.data
        assert not alias.requires_grad and alias.device.type == device
        alias.add_(2)  # .data shares memory with the parameter
        before = param
        param.data = torch.full((2, 2), 5.0, device=device)  # another shape, another tensor's memory
        assert param is before and param.requires_grad and isinstance(param, torch.nn.Parameter)
        (param * 3).sum().backward()
        return param, param.grad, alias

    _assert_same(run)


def test_views_and_in_place_operations_through_them() -> None:
    def run(device: str) -> Any:
        base = torch.arange(24.0, device=device).reshape(4, 6)
        base[1].mul_(-1)
        base.t()[2].add_(100)
        base.view(2, 12)[1, ::3] = 0.5
        diag = base.diagonal()
        diag.sub_(7)
        window = base.unfold(1, 3, 2)
        window[0, 0].fill_(9)
        x = torch.randn(3, 4).to(device).requires_grad_()
        y = x * 1
        y[:, 1:3].mul_(2)  # autograd rebases the view's history onto its base
        y.sum().backward()
        return base, window.shape, window.stride(), diag._base is base, x.grad

    _assert_same(run)


def test_requires_grad_() -> None:
    def run(device: str) -> Any:
        x = torch.randn(3).to(device)
        assert x.requires_grad_() is x and x.requires_grad and x.is_leaf
        y = (x**2).sum()
        y.backward()
        frozen = torch.randn(3).to(device).requires_grad_(False)
        z = x * frozen
        assert z.requires_grad and not frozen.requires_grad
        return x.grad, z

    _assert_same(run)


# --- hooks -------------------------------------------------------------------------------------------------------


def test_tensor_and_module_hooks() -> None:
    def run(device: str) -> Any:
        model = _mlp(device)
        seen: dict[str, list[Any]] = {"pre": [], "backward": []}
        model[0].register_forward_pre_hook(lambda m, args: seen["pre"].append(args[0].sum()))
        model[0].register_forward_hook(lambda m, args, out: out * 2)  # replaces the output
        model[2].register_full_backward_hook(lambda m, gin, gout: seen["backward"].append(gout[0].sum()))
        accumulated: list[Any] = []
        model[2].weight.register_post_accumulate_grad_hook(lambda p: accumulated.append(p.grad.sum()))
        x = torch.randn(5, 16).to(device).requires_grad_()
        x.register_hook(lambda grad: grad * 10)  # replaces the gradient
        hidden = model[1](model[0](x))
        hidden.retain_grad()
        model[2](hidden).pow(2).sum().backward()
        return x.grad, hidden.grad, model[0].weight.grad, seen, accumulated

    _assert_same(run)


def test_a_tensor_hook_that_raises_in_backward_raises_where_backward_was_called() -> None:
    def hook(grad: torch.Tensor) -> None:
        raise ValueError("the hook's own error")

    def accumulated(param: torch.Tensor) -> None:
        raise KeyError("the post-accumulate hook's own error")

    for device in DEVICES:
        x = torch.randn(3).to(device).requires_grad_()
        y = x * 2
        y.register_hook(hook)
        with pytest.raises(ValueError, match="the hook's own error"):
            y.sum().backward()
        x.register_post_accumulate_grad_hook(accumulated)
        with pytest.raises(KeyError, match="the post-accumulate hook's own error"):
            (x * 3).sum().backward()


# --- autograd tools ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing(use_reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    def run(device: str) -> Any:
        model = _mlp(device)
        x = torch.randn(8, 16).to(device).requires_grad_()
        out = checkpoint(model, x, use_reentrant=use_reentrant)
        out.square().mean().backward()
        return out, x.grad, [p.grad for p in model.parameters()]

    _assert_same(run)


def test_torch_func_grad_vmap_and_functional_call() -> None:
    from torch.func import functional_call, grad, vmap

    def run(device: str) -> Any:
        model = _mlp(device)
        params = {name: p.detach() for name, p in model.named_parameters()}
        x = torch.randn(6, 16).to(device)

        def loss(p: dict[str, torch.Tensor], sample: torch.Tensor) -> torch.Tensor:
            return functional_call(model, p, (sample.unsqueeze(0),)).square().sum()

        per_sample = vmap(grad(loss), in_dims=(None, 0))(params, x)
        batched = vmap(torch.dot)(x, x)
        return per_sample, batched, functional_call(model, params, (x,))

    _assert_same(run)


def test_averaged_model() -> None:
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    def run(device: str) -> Any:
        model = _mlp(device)
        swa = AveragedModel(model)
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 16).to(device)).sum().backward()
            optimizer.step()
            swa.update_parameters(model)
            ema.update_parameters(model)
        assert swa.module[0].weight.shape == (32, 16)
        return list(swa.parameters()), list(ema.parameters()), int(swa.n_averaged)

    _assert_same(run)


def test_parametrizations() -> None:
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import orthogonal

    class Symmetric(torch.nn.Module):
        def forward(self, weight: torch.Tensor) -> torch.Tensor:
            return weight.triu() + weight.triu(1).transpose(0, 1)

    def run(device: str) -> Any:
        square = torch.nn.Linear(6, 6).to(device)
        parametrize.register_parametrization(square, "weight", Symmetric())
        rotation = orthogonal(torch.nn.Linear(6, 6).to(device))
        x = torch.randn(3, 6).to(device)
        out = rotation(square(x))
        out.sum().backward()
        weight = square.weight
        torch.testing.assert_close(weight, weight.T)
        return out, weight, square.parametrizations.weight.original.grad

    _assert_same(run)


# --- generators, copies, loading --------------------------------------------------------------------------------


def test_generators() -> None:
    for device in DEVICES:
        generator = torch.Generator(device=device)
        assert generator.device.type == device and isinstance(generator, torch.Generator)
        draws = []
        for _ in range(2):
            generator.manual_seed(7)  # the same seed gives the same numbers, on the generator's device
            draws.append([torch.randn(5, device=device, generator=generator)])
            draws[-1].append(torch.empty(4, device=device).uniform_(generator=generator))
            draws[-1].append(torch.randperm(6, device=device, generator=generator))
            draws[-1].append(torch.bernoulli(torch.full((8,), 0.5, device=device), generator=generator))
        state = generator.get_state()
        first = torch.rand(3, device=device, generator=generator)
        generator.set_state(state)
        again = torch.rand(3, device=device, generator=generator)
        assert all(t.device.type == device for t in (*draws[0], first))
        torch.testing.assert_close(_host(draws[0]), _host(draws[1]))
        torch.testing.assert_close(again.cpu(), first.cpu())
    assert isinstance(torch.default_generator, torch.Generator)


@pytest.mark.emulator_only
def test_an_hpu_generator_draws_what_a_cpu_generator_draws_on_the_cpu_backing() -> None:
    def run(device: str) -> Any:
        generator = torch.Generator(device=device).manual_seed(7)
        return [
            torch.randn(5, device=device, generator=generator),
            torch.empty(4, device=device).normal_(generator=generator),
            torch.randint(0, 9, (6,), device=device, generator=generator),
        ]

    _assert_same(run)


def test_non_blocking_copies() -> None:
    def run(device: str) -> Any:
        host = torch.randn(64, 8).pin_memory() if device != "cpu" else torch.randn(64, 8)
        on_device = host.to(device, non_blocking=True)
        back = (on_device * 2).to("cpu", non_blocking=True)
        if device != "cpu":
            torch.hpu.synchronize()  # type: ignore[attr-defined]
        target = torch.empty(64, 8, device=device)
        target.copy_(host, non_blocking=True)
        return on_device, back.to(device), target

    _assert_same(run)


# torch 2.13 deprecates pin_memory_device (it pins for the current accelerator, "hpu" here, anyway); existing Gaudi
# code passes it, so this test does too.
@pytest.mark.filterwarnings("ignore:pin_memory_device is deprecated:UserWarning")
def test_pinned_memory_data_loading() -> None:
    dataset = torch.utils.data.TensorDataset(torch.randn(10, 3), torch.arange(10))

    def batches(**kwargs: Any) -> list[Any]:
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, **kwargs)
        return list(loader)

    pinned = batches(pin_memory=True, pin_memory_device="hpu")
    plain = batches()
    assert all(t.is_pinned() for batch in pinned + batches(pin_memory=True) for t in batch)
    assert not any(t.is_pinned() for batch in plain for t in batch)
    torch.testing.assert_close(pinned, plain)
    moved = [[t.to("hpu", non_blocking=True) for t in batch] for batch in pinned]
    assert all(t.device.type == "hpu" for batch in moved for t in batch)
    torch.testing.assert_close(_host(moved), plain)
