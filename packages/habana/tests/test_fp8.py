"""fp8 training on HPUs: the SDK's Transformer Engine under the precision plugins, its numerics, Gaudi generations.

``HPUPrecisionPlugin("fp8").convert_modules(model, replace_layers=True)`` swaps ``torch.nn.Linear`` for the SDK's
``transformer_engine.Linear``; the steps run under its ``fp8_autocast`` with a ``DelayedScaling`` recipe. The tests
read the layers' state through the SDK's own names (``fp8_meta["scaling_fwd"].scale``, ``.amax_history``), so they
hold for the SDK as for its emulator. The generation is read when the SDK loads, so tests for another generation
start a child process.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import math
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, digits_classifier, digits_loaders, free_port, script_env
from lightning.fabric import Fabric
from lightning.pytorch import Trainer

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUAccelerator, HPUPrecisionPlugin, sdk
from lightning_accel.habana.fabric import HPUPrecision

GENERATION_VAR = "LIGHTNING_ACCEL_EMULATE_HPU_TYPE"


@pytest.fixture
def te() -> Any:
    return sdk.transformer_engine_module()


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.detach().float() - ref.float()).norm() / ref.float().norm())


def _trainer(**kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def test_fit_in_fp8_replaces_the_linear_layers_and_reaches_a_real_accuracy(te: Any) -> None:
    torch.manual_seed(0)
    model = digits_classifier()
    original = copy.deepcopy(model)
    plugin = HPUPrecisionPlugin("fp8")
    assert plugin.fp8_train_available

    assert plugin.convert_modules(model, replace_layers=True) is model
    layers = [m for m in model.modules() if isinstance(m, te.Linear)]
    assert len(layers) == 2
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    # The weights came along: outside fp8_autocast a Transformer Engine layer is a plain linear layer.
    x = torch.rand(8, 64)
    torch.testing.assert_close(model(x), original(x))

    train, val = digits_loaders()
    trainer = _trainer(max_epochs=4, plugins=[plugin])
    trainer.fit(model, train, val)
    assert float(trainer.callback_metrics["val_acc"]) > 0.9
    # The layers trained in fp8: their scales moved off 1 from the amaxes they recorded.
    for layer in layers:
        assert bool((layer.fp8_meta["scaling_fwd"].scale != 1).all())
        assert bool((layer.fp8_meta["scaling_bwd"].scale != 1).all())


def _outputs(plugin: HPUPrecisionPlugin, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with plugin.forward_context():
        model(x)  # a first training forward records the amaxes the next one scales with
        return model(x)


@pytest.mark.parametrize(("fp8_format", "low", "high"), [("HYBRID", 0.01, 0.06), ("E5M2", 0.03, 0.12)])
def test_fp8_forward_differs_from_fp32_by_fp8_rounding_not_bf16s(
    te: Any, fp8_format: str, low: float, high: float
) -> None:
    torch.manual_seed(0)
    host = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    # Copied on the host: a deep copy of a module on the emulated "hpu" loses its parameters' shapes (an emulator
    # defect of the device layer, reported), and the converted layers would copy a broadcast scalar.
    model, copied = host.to("hpu"), copy.deepcopy(host).to("hpu")
    x = torch.randn(512, 256, device="hpu")
    reference = model(x).detach()

    bf16 = _outputs(HPUPrecisionPlugin("bf16-mixed"), model, x)
    fp8_plugin = HPUPrecisionPlugin("fp8")
    converted = fp8_plugin.convert_modules(
        copied, replace_layers=True, recipe={"fp8_format": te.recipe.Format[fp8_format]}
    )
    assert converted[0].weight.shape == (256, 256)
    fp8 = _outputs(fp8_plugin, converted, x)

    fp8_error, bf16_error = _relative_error(fp8, reference), _relative_error(bf16, reference)
    # E4M3 keeps 3 mantissa bits, E5M2 2, bfloat16 7: the errors are fp8's, an order of magnitude above bf16's.
    assert low < fp8_error < high
    assert bf16_error < fp8_error / 8
    assert fp8.dtype == torch.float32


def test_delayed_scaling_keeps_an_amax_history_and_updates_the_scale_after_each_step(te: Any) -> None:
    recipe = te.recipe.DelayedScaling(
        fp8_format=te.recipe.Format.HYBRID, amax_history_len=3, amax_compute_algo="max", margin=1
    )
    layer = te.Linear(16, 4, bias=False)
    with torch.no_grad():
        layer.weight.fill_(0.5)
    peaks = [3.0, 7.0, 2.0, 1.0]
    seen_scales = []
    for step, peak in enumerate(peaks):
        x = torch.zeros(4, 16, device="hpu")
        x[0, 0] = peak
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            out = layer(x)
        out.sum().backward()
        meta = layer.fp8_meta["scaling_fwd"]
        seen_scales.append(float(meta.scale[0]))
        # The amax of this step went to its row of the circular history (input column 0, weight column 1).
        assert float(meta.amax_history[step % 3, 0]) == peak
        assert float(meta.amax_history[step % 3, 1]) == 0.5

    def scale(amax: float) -> float:  # the SDK's: a power of two, fp8_max = 240 for E4M3, minus the margin
        return 2.0 ** (math.floor(math.log2(240.0 / amax)) - 1)

    # Step 1 ran with the initial scale; each later step with the largest amax of the steps before it.
    assert seen_scales == [1.0, scale(3.0), scale(7.0), scale(7.0)]
    history = layer.fp8_meta["scaling_fwd"].amax_history
    assert sorted(history[:, 0].tolist()) == [1.0, 2.0, 7.0]  # step 1's 3.0 fell out of the three-step window
    # The output gradient is all ones: the backward scale is E5M2's, from the backward before.
    assert float(layer.fp8_meta["scaling_bwd"].scale[0]) == 2.0 ** (math.floor(math.log2(57344.0)) - 1)


def test_most_recent_follows_the_last_step_only(te: Any) -> None:
    recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID, amax_history_len=2)
    layer = te.Linear(8, 2, bias=False)
    for peak in (8.0, 0.5, 1.0):
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            layer(torch.full((2, 8), peak, device="hpu")).sum().backward()
    assert float(layer.fp8_meta["scaling_fwd"].scale[0]) == 2.0 ** math.floor(math.log2(240.0 / 0.5))


def test_evaluation_forward_uses_the_scales_and_records_nothing(te: Any) -> None:
    layer = te.Linear(8, 2)
    recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID)
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        layer(torch.full((2, 8), 4.0, device="hpu"))
        history = layer.fp8_meta["scaling_fwd"].amax_history.clone()
        layer.eval()
        layer(torch.full((2, 8), 100.0, device="hpu"))
    torch.testing.assert_close(layer.fp8_meta["scaling_fwd"].amax_history, history)


def test_fp8_scales_survive_a_state_dict_round_trip(te: Any) -> None:
    recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID, amax_history_len=2)
    layer = te.Linear(8, 2)
    for _ in range(3):
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            layer(torch.randn(4, 8, device="hpu") * 10).sum().backward()
    fresh = te.Linear(8, 2)
    fresh.load_state_dict(layer.state_dict())
    for key in ("scaling_fwd", "scaling_bwd", "scaling_hybrid"):
        torch.testing.assert_close(fresh.fp8_meta[key].scale, layer.fp8_meta[key].scale)
        torch.testing.assert_close(fresh.fp8_meta[key].amax_history, layer.fp8_meta[key].amax_history)


@pytest.mark.slow
@pytest.mark.parametrize(("reduce_amax", "scales"), [("1", [32.0, 32.0]), ("0", [64.0, 32.0])])
def test_amaxes_are_reduced_over_the_processes_unless_the_recipe_says_not(
    reduce_amax: str, scales: list[float]
) -> None:
    # Rank 0's input peaks at 3, rank 1's at 6: reduced, both scale by 2 ** floor(log2(240 / 6)) = 32.
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [PYTHON, str(SCRIPTS / "fp8_amax_reduce.py"), reduce_amax],
            env=script_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    reports = {}
    for proc in ranks:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        reports[report["rank"]] = report["scale"]
    assert [reports[0], reports[1]] == scales


def test_fabric_trains_in_fp8(te: Any) -> None:
    torch.manual_seed(0)
    plugin = HPUPrecision("fp8")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    plugin.convert_modules(model, replace_layers=True, recipe=te.recipe.DelayedScaling(amax_history_len=4))
    fabric = Fabric(accelerator="hpu", devices=1, plugins=[plugin])
    assert sum(isinstance(m, te.Linear) for m in model.modules()) == 2
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    train, val = fabric.setup_dataloaders(*digits_loaders())
    for _ in range(4):
        for x, y in train:
            optimizer.zero_grad()
            fabric.backward(torch.nn.functional.cross_entropy(model(x), y))
            optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(dim=1) == y).sum()) for x, y in val)
    assert correct / len(val.dataset) > 0.9
    layer = next(m for m in model.modules() if isinstance(m, te.Linear))
    assert layer.fp8_meta["recipe"].amax_history_len == 4


def test_the_sdk_says_fp8_is_available_on_the_default_gaudi2() -> None:
    assert HPUAccelerator.is_fp8_available() == (True, "")
    assert HPUAccelerator.get_device_name() == "GAUDI2 (emulated)"


def test_fp8_availability_is_the_sdks_1_18_api_not_a_module_level_function(te: Any) -> None:
    # Bridge 1.18.0 transformer_engine/fp8.py: check_fp8_support() at module level (:30-36), is_fp8_available only
    # as FP8GlobalStateManager's classmethod (:74-78). Code calling fp8.is_fp8_available() fails on Gaudi.
    assert not hasattr(te.fp8, "is_fp8_available")
    assert te.fp8.check_fp8_support() == (True, "")
    assert te.fp8.FP8GlobalStateManager.is_fp8_available() == (True, "")
    # Our plugins are built on that SDK.
    assert HPUPrecisionPlugin("fp8").fp8_train_available
    assert HPUPrecision("fp8").fp8_train_available


def test_the_cpp_extensions_cast_and_multiply_on_the_sdks_fp8_operators_and_record_amaxes(te: Any) -> None:
    from habana_frameworks.torch.hpex.experimental.transformer_engine import cpp_extensions as tex
    from habana_frameworks.torch.hpex.experimental.transformer_engine.utils import FP8FwdTensors, FP8TensorMeta

    meta = FP8TensorMeta()
    meta.scale = torch.tensor([2.0, 0.5], device="hpu")
    meta.scale_inv = torch.reciprocal(meta.scale)
    meta.amax_history = torch.zeros(1, 2, device="hpu")
    meta.amax_history_index = torch.zeros(1, dtype=torch.int32, device="hpu")
    x = torch.tensor([[1.0, -3.0]], device="hpu")
    w = torch.tensor([[4.0, 2.0], [1.0, 1.0]], device="hpu")
    x8 = tex.cast_to_fp8(x, meta, FP8FwdTensors.GEMM1_INPUT, torch.float8_e4m3fn)
    w8 = tex.cast_to_fp8(w, meta, FP8FwdTensors.GEMM1_WEIGHT, torch.float8_e4m3fn)
    assert x8.float().cpu().tolist() == [[2.0, -6.0]]  # times the input's scale, 2
    assert meta.amax_history.cpu().tolist() == [[3.0, 4.0]]  # each cast recorded its amax in its column
    x_back = tex.cast_from_fp8(x8, meta, FP8FwdTensors.GEMM1_INPUT, torch.float32)
    assert x_back.cpu().tolist() == [[1.0, -3.0]]
    # fp8_gemm(A=weight, B=input), NVIDIA's order: input @ weight.T, each operand times its scale_inv.
    out = tex.fp8_gemm(w8, meta.scale_inv[1], x8, meta.scale_inv[0], torch.float32)
    assert out.cpu().tolist() == [[-2.0, -2.0]]
    with pytest.raises(NotImplementedError, match=r"cpp_extensions.fp8_gelu is not emulated"):
        tex.fp8_gelu(x, meta, FP8FwdTensors.GEMM1_INPUT, torch.float8_e4m3fn)


class _Tracker:
    """A Megatron-style random-state tracker with no states of its own."""

    def get_states(self) -> dict[str, Any]:
        return {}

    def set_states(self, states: dict[str, Any]) -> None:
        assert states == {}

    def fork(self) -> Any:
        return contextlib.nullcontext()


def test_checkpointed_layers_recompute_with_the_same_fp8_scales_as_a_plain_run(
    te: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PT_TE_FORCE_SR_BWD", "0")  # HYBRID's stochastic rounding would draw differently in each run
    recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID, amax_history_len=2, amax_compute_algo="max")

    def layers() -> torch.nn.Module:
        torch.manual_seed(0)  # the same weights twice (no deep copy: on the emulated "hpu" it loses their shapes)
        return torch.nn.Sequential(te.Linear(16, 16), torch.nn.GELU(), te.Linear(16, 4))

    plain, checkpointed = layers(), layers()
    for step in range(3):
        # Two micro-batches, forwards first, then the backwards in the same order (a pipeline's 1F1B keeps it): the
        # second forward moves the scales on, and the first recompute must use the scales of its own forward.
        # As with torch.utils.checkpoint(use_reentrant=True), the inputs carry the graph (hidden states do).
        xs = [(torch.randn(8, 16, device="hpu") * (step + 1 + i)).requires_grad_() for i in range(2)]
        # The SDK's checkpoint recomputes in fp8 when the backward runs inside fp8_autocast (its
        # activation_recompute_forward asks is_fp8_enabled(), transformer_engine/distributed.py at 1.18.0).
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            expected = [plain(x) for x in xs]
            outs = [te.checkpoint(checkpointed, False, _Tracker, None, x) for x in xs]
            for out, reference in zip(outs, expected, strict=True):
                torch.testing.assert_close(out, reference, rtol=0, atol=0)
                reference.square().sum().backward()
                out.square().sum().backward()
        for ours, theirs in zip(checkpointed.modules(), plain.modules(), strict=True):
            if isinstance(ours, te.Linear):
                torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=0, atol=0)
                for key in ("scaling_fwd", "scaling_bwd", "scaling_hybrid"):
                    torch.testing.assert_close(ours.fp8_meta[key].scale, theirs.fp8_meta[key].scale, rtol=0, atol=0)
                    torch.testing.assert_close(
                        ours.fp8_meta[key].amax_history, theirs.fp8_meta[key].amax_history, rtol=0, atol=0
                    )
                assert ours.run_cnt == theirs.run_cnt == 2 * (step + 1)  # a recompute is not a run of its own
    assert bool((plain[0].fp8_meta["scaling_fwd"].scale != 1).all())  # the scales did move over the steps


def test_pt_te_dump_tensors_saves_each_layers_operands_as_the_sdk_names_them(
    te: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    linear = importlib.import_module(f"{te.__name__}.module.linear")
    # The SDK reads PT_TE_DUMP_TENSORS_PATH when the module loads; the flag at every forward.
    monkeypatch.setattr(linear, "DUMP_TENSORS_PATH", str(tmp_path))
    monkeypatch.setenv("PT_TE_DUMP_TENSORS", "1")
    layer = te.Linear(8, 4)
    x = torch.randn(2, 8, device="hpu")
    with te.fp8_autocast(enabled=True):
        layer(x).sum().backward()
    name = layer.name
    assert name.endswith("_Linear")
    dumped = {p.name for p in tmp_path.iterdir()}
    assert dumped == {
        f"{name}_inp_1_recompute_False.pt",
        f"{name}_weight_1_recompute_False.pt",
        f"{name}_inputmap_fp8_1.pt",
        f"{name}_weight_bwd_1.pt",
        f"{name}_grad_output_1.pt",
    }
    # The SDK saves the HPU tensor as it is; loading it without map_location gives it back on the HPU, as on Gaudi.
    torch.testing.assert_close(torch.load(tmp_path / f"{name}_inp_1_recompute_False.pt"), x)


def test_a_model_holding_any_transformer_engine_layer_is_left_as_it_is(
    te: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From 1.19 the package re-exports intel_transformer_engine: a layer type beside Linear, named by that module.
    class LayerNormLinear(torch.nn.Module):
        pass

    LayerNormLinear.__module__ = "intel_transformer_engine.module.layernorm_linear"
    monkeypatch.setattr(te, "LayerNormLinear", LayerNormLinear, raising=False)
    model = torch.nn.Sequential(LayerNormLinear(), torch.nn.Linear(4, 4))
    HPUPrecisionPlugin("fp8").convert_modules(model, replace_layers=True)
    assert type(model[1]) is torch.nn.Linear  # the user converted what they wanted; the rest stays
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4))
    HPUPrecisionPlugin("fp8").convert_modules(plain, replace_layers=True)
    assert isinstance(plain[0], te.Linear)


def test_bad_convert_modules_arguments_are_clear_errors(te: Any) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ConfigurationError, match=r"precision is 'bf16-mixed'.*precision='fp8'"):
        HPUPrecisionPlugin("bf16-mixed").convert_modules(model, replace_layers=True)
    plugin = HPUPrecisionPlugin("fp8")
    with pytest.raises(ConfigurationError, match=r"inference=True, replace_layers=True.*for fp8 training"):
        plugin.convert_modules(model, inference=True, replace_layers=True)
    with pytest.raises(ConfigurationError, match=r"recipe='hybrid' is not an fp8 recipe.*DelayedScaling"):
        plugin.convert_modules(model, recipe="hybrid")
    with pytest.raises(ConfigurationError, match=r"recipe=\{'fp8_format'.*Only E5M2 and HYBRID training"):
        plugin.convert_modules(model, recipe={"fp8_format": te.recipe.Format.E4M3})
    with pytest.raises(ConfigurationError, match=r"recipe=\{'amax_history_len': 0\}.*integer >= 1"):
        plugin.convert_modules(model, recipe={"amax_history_len": 0})
    with pytest.raises(ConfigurationError, match=r"quant=False\): quant is for fp8 inference \(inference=True\) only"):
        plugin.convert_modules(model, quant=False)
    with pytest.raises(ConfigurationError, match=r"module=.*torch.nn.Module"):
        plugin.convert_modules("model", replace_layers=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"precision='fp9' is not supported on HPUs.*'fp8'"):
        HPUPrecisionPlugin("fp9")
    with pytest.raises(ConfigurationError, match=r"bf16_file_path / fp32_file_path were given with precision='fp8'"):
        HPUPrecision("fp8", bf16_file_path="ops.txt")
    assert type(model[0]) is torch.nn.Linear  # nothing was converted by a refused call


_GENERATION_PROBE = textwrap.dedent(
    """
    import json
    import tempfile
    import torch
    from lightning_accel.core.errors import ConfigurationError
    from lightning_accel.habana import HPUAccelerator, HPUPrecisionPlugin, sdk
    from lightning_accel.habana.fabric import HPUPrecision

    scratch = tempfile.TemporaryDirectory()  # removed when the probe exits
    # The SDK acquires a device when asked its name: count the asks while each plugin is built.
    hpu = sdk.hpu_module()
    device_name, asked = hpu.get_device_name, []
    hpu.get_device_name = lambda *args: asked.append(args) or device_name(*args)
    refusals, opened = {}, {}
    for name, build in [
        ("trainer fp8", lambda: HPUPrecisionPlugin("fp8")),
        ("trainer 16-mixed", lambda: HPUPrecisionPlugin("16-mixed")),
        ("fabric fp8", lambda: HPUPrecision("fp8")),
        ("trainer fp8 inference", lambda: HPUPrecisionPlugin("fp8").convert_modules(
            torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, quant=False, fp8_data_path=scratch.name
        )),
        ("is_fp8_available", HPUAccelerator.is_fp8_available),
    ]:
        asked.clear()
        try:
            build()
            refusals[name] = None
        except ConfigurationError as exc:
            refusals[name] = str(exc)
        opened[name] = len(asked)
    hpu.get_device_name = device_name
    print(json.dumps({
        "name": HPUAccelerator.get_device_name(),
        "fp8": list(HPUAccelerator.is_fp8_available()),
        "refusals": refusals,
        "device_name_asked": opened,
    }))
    """
)


def _probe_generation(value: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", _GENERATION_PROBE],
        env=script_env(**{GENERATION_VAR: value}),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_first_generation_gaudi_is_refused_when_the_sdk_loads() -> None:
    # The emulated SDK (bcc5172, the 1.24 period) runs on Gaudi 2 and 3 only: a first-generation Gaudi fails the load,
    # before a precision plugin could refuse fp8 or 16-mixed on it.
    result = _probe_generation("gaudi")
    assert result.returncode != 0
    assert f"{GENERATION_VAR}='gaudi' is not supported: first-generation Gaudi is not supported" in result.stderr
    assert "Accepted: 'gaudi2', 'gaudi3'" in result.stderr


@pytest.mark.slow
def test_gaudi3_has_fp8_and_a_bad_generation_is_a_clear_error() -> None:
    result = _probe_generation("Gaudi3")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["name"] == "GAUDI3 (emulated)"
    assert report["fp8"] == [True, ""]
    assert report["refusals"] == {
        "trainer fp8": None,
        "trainer 16-mixed": None,
        "fabric fp8": None,
        "trainer fp8 inference": None,
        "is_fp8_available": None,
    }

    bad = _probe_generation("gaudi5")
    assert bad.returncode != 0
    assert f"{GENERATION_VAR}='gaudi5' names no Gaudi generation. Accepted: 'gaudi2', 'gaudi3'" in bad.stderr
