"""fp8 inference through Intel Neural Compressor (INC) on HPUs: measure, quantize, predict; the errors; INC unchanged.

``HPUPrecisionPlugin("fp8").convert_modules(model, inference=True, quant=False, fp8_data_path=...)`` prepares the
model for measuring with INC's ``prepare``; ``trainer.test``/``predict`` records the ranges and writes them when it
ends; ``quant=True`` quantizes with INC's ``convert``, whose layers call the SDK's ``torch.ops.hpu.cast_to_fp8_v2``
and ``fp8_gemm_v2``. The cases of lightning-habana 1.7's ``tests/test_pytorch/test_precision.py`` that do not depend
on hardware numbers are ported here as our own (their names are given where one is).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from _habana_helpers import PYTHON, SCRIPTS, digits_classifier, digits_loaders, free_port, script_env
from lightning.fabric import Fabric
from lightning.pytorch import Trainer

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin, sdk
from lightning_accel.habana.fabric import HPUPrecision

MEASUREMENT_FILES = {"measure_hooks_maxabs.json", "measure_hooks_maxabs.npz", "measure_hooks_maxabs_mod_list.json"}


def _trainer(plugin: Any = None) -> Trainer:
    return Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[plugin] if plugin is not None else None,
    )


def _logits(plugin: Any, model: Any, loader: Any) -> torch.Tensor:
    model.predict_step = lambda batch, *args: model(batch[0]).float()
    return torch.cat(_trainer(plugin).predict(model, loader)).cpu()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def trained() -> tuple[Any, Any, Any]:
    """A digits classifier trained for three epochs, and its loaders."""
    torch.manual_seed(0)
    model = digits_classifier()
    train, val = digits_loaders()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train, val)
    return model.cpu(), train, val


@pytest.fixture
def inc() -> Any:
    """INC's quantization API (the extra lightning-accel-habana[fp8-inference]; the hpu_tests session installs it)."""
    import neural_compressor.torch.quantization

    return neural_compressor.torch.quantization


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.detach() - ref.detach()).norm() / ref.detach().norm())


def test_a_measured_then_quantized_model_predicts_within_fp8_tolerance_of_bf16(
    trained: tuple[Any, Any, Any], tmp_path: Path
) -> None:
    model, train, val = copy.deepcopy(trained[0]), trained[1], trained[2]
    bf16 = _logits(HPUPrecisionPlugin("bf16-mixed"), model, val)
    plugin = HPUPrecisionPlugin("fp8")
    assert plugin.fp8_inference_available and plugin.fp8_training_available

    assert plugin.convert_modules(model, inference=True, quant=False, fp8_data_path=tmp_path) is model
    _trainer(plugin).test(model, train)  # calibration on the training data
    plugin.convert_modules(model, inference=True, quant=True, fp8_data_path=tmp_path)
    assert [type(m).__name__ for m in model.net] == ["PatchedLinear", "ReLU", "PatchedLinear"]
    fp8 = _logits(plugin, model, val)

    # Measured on the digits MLP: relative error 0.024 against bf16 (E4M3 keeps 3 mantissa bits, bf16 7), 98.7% of
    # the predicted classes the same. The bounds: fp8 rounding happened (bf16's own rounding of this MLP is about
    # 0.003, docs/habana/advanced.md) and stayed fp8-sized.
    error = _relative_error(fp8, bf16)
    assert 0.008 < error < 0.06, error
    agreement = float((fp8.argmax(dim=1) == bf16.argmax(dim=1)).float().mean())
    assert agreement > 0.95, agreement


def test_measurements_are_written_where_asked_and_reused_by_another_model(
    trained: tuple[Any, Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system_temp = tmp_path / "system_temp"
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    original, val = trained[0], trained[2]
    measured, fresh = copy.deepcopy(original), copy.deepcopy(original)
    plugin = HPUPrecisionPlugin("fp8")
    plugin.convert_modules(measured, inference=True, quant=False, fp8_data_path=tmp_path / "calibration")
    folder = tmp_path / "calibration" / "inc_output"
    assert not MEASUREMENT_FILES & {p.name for p in folder.glob("*")}  # written when the run ends, not before
    _trainer(plugin).predict(measured, val)
    # lightning-habana 1.7's test_hpu_precision_fp8_inference_measurement: these three files, there.
    assert {p.name for p in folder.iterdir()} == MEASUREMENT_FILES

    # A model that never saw data quantizes from those files, as the measured one does.
    other = HPUPrecisionPlugin("fp8")
    other.convert_modules(fresh, inference=True, quant=True, fp8_data_path=tmp_path / "calibration")
    plugin.convert_modules(measured, inference=True, quant=True, fp8_data_path=tmp_path / "calibration")
    torch.testing.assert_close(_logits(other, fresh, val), _logits(plugin, measured, val), rtol=0, atol=0)
    # INC's configs went into the data folder too: nothing is left in the system's temporary folder.
    assert {"inc_measure_config.json", "inc_quantize_config.json"} <= {
        p.name for p in (tmp_path / "calibration").iterdir()
    }
    assert list(system_temp.iterdir()) == []


def test_one_process_under_a_launchers_rank_variables_measures_and_quantizes(
    trained: tuple[Any, Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torchrun or SLURM with one process: LOCAL_RANK and WORLD_SIZE are set, no process group runs. INC 3.7.1 alone
    # reads them as strings there and fails comparing them with 0.
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    model, val = copy.deepcopy(trained[0]), trained[2]
    plugin = HPUPrecisionPlugin("fp8")
    plugin.convert_modules(model, inference=True, quant=False, fp8_data_path=tmp_path)
    _trainer(plugin).predict(model, val)
    plugin.convert_modules(model, inference=True, quant=True, fp8_data_path=tmp_path)
    assert _logits(plugin, model, val).shape == (len(val.dataset), 10)
    assert (tmp_path / "inc_output" / "measure_hooks_maxabs.npz").is_file()


def test_a_quantization_without_measurements_is_a_clear_error(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    with pytest.raises(
        ConfigurationError, match=r"quant=True, fp8_data_path=.*no fp8 measurements in .*Measure first.*quant=False"
    ):
        HPUPrecisionPlugin("fp8").convert_modules(model, inference=True, quant=True, fp8_data_path=tmp_path)


@pytest.mark.parametrize(
    ("quant", "message"),
    [
        ("file_path_does_not_exist.json", r"quant='file_path_does_not_exist.json'\): no such INC config file"),
        (None, r"quant=None\) is not accepted. Accepted: True .*False .*path of an INC fp8 JSON config"),
        ({"allowlist": {"types": [], "names": []}}, r"mode is None. Accepted: 'MEASURE' .* or 'QUANTIZE'"),
    ],
)
def test_a_bad_quant_is_a_clear_error(quant: Any, message: str, tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    with pytest.raises(ConfigurationError, match=message):
        HPUPrecisionPlugin("fp8").convert_modules(model, inference=True, quant=quant, fp8_data_path=tmp_path)
    assert type(model[0]) is torch.nn.Linear


def test_a_config_file_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "measure.json"
    config.write_text("{mode: MEASURE")
    with pytest.raises(ConfigurationError, match=r"measure.json.*the file is not JSON"):
        HPUPrecisionPlugin("fp8").convert_modules(
            torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, quant=str(config), fp8_data_path=tmp_path
        )


@pytest.mark.parametrize("source", ["file", "dict"])
def test_a_users_config_measures_into_fp8_data_path_and_is_not_changed(source: str, tmp_path: Path) -> None:
    # lightning-habana 1.7's test_hpu_precision_fp8_patch and test_hpu_precision_fp8_inference_with_quant_dict.
    measure = {"mode": "MEASURE", "observer": "maxabs", "allowlist": {"types": [], "names": []}}
    config: Any = measure
    if source == "file":
        config = tmp_path / "measure.json"
        config.write_text(json.dumps(measure))
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    plugin = HPUPrecisionPlugin("fp8")
    plugin.convert_modules(model, inference=True, quant=config, fp8_data_path=tmp_path / "data")
    with plugin.forward_context():
        model.to("hpu")(torch.randn(4, 8, device="hpu"))
    plugin.teardown()
    assert {p.name for p in (tmp_path / "data" / "inc_output").iterdir()} == MEASUREMENT_FILES
    if source == "file":
        assert json.loads(config.read_text()) == measure  # lightning-habana rewrote it; nothing of yours changes
    else:
        assert "dump_stats_path" not in measure


def test_fp8_data_path_defaults_to_habana_logs_and_one_of_them_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HABANA_LOGS", str(tmp_path / "logs"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    plugin = HPUPrecisionPlugin("fp8")
    plugin.convert_modules(model, inference=True, quant=False)
    with plugin.forward_context():
        model.to("hpu")(torch.randn(4, 8, device="hpu"))
    plugin.teardown()
    assert {p.name for p in (tmp_path / "logs" / "inc_output").iterdir()} == MEASUREMENT_FILES

    monkeypatch.delenv("HABANA_LOGS")
    unset = r"fp8_data_path=None\) with HABANA_LOGS unset.*fp8_data_path='<folder>'"
    with pytest.raises(ConfigurationError, match=unset):
        HPUPrecisionPlugin("fp8").convert_modules(
            torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, quant=False
        )


@pytest.mark.parametrize(
    ("params", "accepted"),
    [
        ({"inference": True, "quant": False}, True),
        ({"inference": True, "quant": {"mode": "MEASURE", "allowlist": {"types": [], "names": []}}}, True),
        ({"inference": False}, True),
        ({"inference": False, "replace_layers": True}, True),
        ({"inference": False, "replace_layers": True, "recipe": "DelayedScaling"}, True),
        ({"inference": True, "quant": False, "replace_layers": True}, False),
    ],
)
def test_convert_modules_accepts_lightning_habanas_arguments(
    params: dict[str, Any], accepted: bool, tmp_path: Path
) -> None:
    # lightning-habana 1.7's test_hpu_precision_convert_modules (its refused cases are the tests above).
    te = sdk.transformer_engine_module()
    if params.get("recipe") == "DelayedScaling":
        params = {**params, "recipe": te.recipe.DelayedScaling}  # the class itself, as its test passed it
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    plugin = HPUPrecisionPlugin("fp8")
    if accepted:
        plugin.convert_modules(module=model, fp8_data_path=tmp_path, **params)
        if params.get("replace_layers"):
            assert isinstance(model[0], te.Linear)
    else:
        with pytest.raises(ConfigurationError, match=r"inference=True, replace_layers=True.*for fp8 training"):
            plugin.convert_modules(module=model, fp8_data_path=tmp_path, **params)


def test_a_model_that_is_one_layer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"module=Linear\(.*cannot swap the model itself.*Sequential"):
        HPUPrecisionPlugin("fp8").convert_modules(
            torch.nn.Linear(2, 2), inference=True, quant=False, fp8_data_path=tmp_path
        )


def test_only_an_fp8_plugin_converts_modules() -> None:
    # lightning-habana 1.7's test_hpu_precision_convert_modules_precision_not_fp8 (its AssertionError is our error).
    with pytest.raises(ConfigurationError, match=r"precision is 'bf16-mixed'.*precision='fp8'"):
        HPUPrecisionPlugin("bf16-mixed").convert_modules(
            torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, quant=False
        )


def test_a_missing_inc_is_an_error_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # lightning-habana 1.7's test_hpu_precision_init_fp8_inference_no_inc and ..._fp8_inference_dependancy.
    for name in [m for m in sys.modules if m == "neural_compressor" or m.startswith("neural_compressor.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "neural_compressor", None)
    plugin = HPUPrecisionPlugin("fp8")
    assert plugin.fp8_training_available and not plugin.fp8_inference_available
    with pytest.raises(ConfigurationError, match=r"pip install 'lightning-accel-habana\[fp8-inference\]'"):
        plugin.convert_modules(
            torch.nn.Sequential(torch.nn.Linear(2, 2)), inference=True, quant=False, fp8_data_path=tmp_path
        )


def test_fabric_measures_and_quantizes_too(trained: tuple[Any, Any, Any], tmp_path: Path) -> None:
    model, train, val = copy.deepcopy(trained[0].net), trained[1], trained[2]
    plugin = HPUPrecision("fp8")
    plugin.convert_modules(model, inference=True, quant=False, fp8_data_path=tmp_path)
    fabric = Fabric(accelerator="hpu", devices=1, plugins=[plugin])
    measuring = fabric.setup_module(model)
    with torch.no_grad():
        for x, _ in fabric.setup_dataloaders(train):
            measuring(x)
    plugin.teardown()  # Fabric has no end of a run: the measurements are written here
    assert {p.name for p in (tmp_path / "inc_output").iterdir()} == MEASUREMENT_FILES
    plugin.convert_modules(model, inference=True, quant=True, fp8_data_path=tmp_path)
    x, _ = next(iter(val))
    with torch.no_grad():
        out = fabric.setup_module(model)(x.to("hpu")).float()
        ref = copy.deepcopy(trained[0].net).to("hpu")(x.to("hpu")).float()
    assert 0.008 < _relative_error(out, ref) < 0.06  # measured: 0.024, as through the Trainer


def test_incs_own_prepare_and_convert_run_unchanged_on_the_emulated_hpu(
    inc: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Intel's documented flow (neural_compressor.torch.quantization), no lightning-accel code in between. INC leaves
    # its config files in the temporary folder: the test's own.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("hpu")
    model = model.to(torch.bfloat16)
    data = torch.randn(256, 32, device="hpu", dtype=torch.bfloat16)
    reference = model(data).float()
    dump = str(tmp_path / "measure")
    prepared = inc.prepare(model, inc.FP8Config(mode="MEASURE", observer="maxabs", dump_stats_path=dump))
    prepared(data)
    inc.finalize_calibration(prepared)
    quantized = inc.convert(prepared, inc.FP8Config(mode="QUANTIZE", scale_method="maxabs_hw", dump_stats_path=dump))
    out = quantized(data)
    assert out.dtype == torch.bfloat16 and out.device.type == "hpu"
    # Measured: 0.051 (two E4M3 products on small random values); bf16 alone is about ten times closer.
    assert 0.01 < _relative_error(out.float(), reference) < 0.08


def test_the_fp8_inference_example_measures_quantizes_and_predicts(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "habana" / "fp8_inference.py"
    result = subprocess.run(
        [PYTHON, str(example), "--out", str(tmp_path / "out"), "--max-epochs", "3"],
        env=script_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"measurements in {tmp_path / 'out' / 'inc_output'}: " + ", ".join(sorted(MEASUREMENT_FILES)) in out
    assert "quantized layers: ['PatchedLinear', 'ReLU', 'PatchedLinear']" in out
    accuracy = out.split("test accuracy: bf16 ", 1)[1].splitlines()[0]  # "0.955, fp8 0.955"
    assert float(accuracy.split()[-1]) > 0.9
    agreement, difference = (
        out.split("agreeing with bf16: ", 1)[1].splitlines()[0].split("; relative difference of the outputs: ")
    )
    # Measured with 3 epochs: accuracy 0.942 in bf16 and fp8, agreement 1.000, difference 0.013.
    assert float(agreement) > 0.95 and 0.005 < float(difference) < 0.06


@pytest.mark.slow
def test_two_ranks_measure_into_their_own_files_and_quantize_as_one_rank_does(
    trained: tuple[Any, Any, Any], tmp_path: Path
) -> None:
    model, train, val = copy.deepcopy(trained[0]), trained[1], trained[2]
    calibration = torch.cat([batch[0] for batch in train])
    validation = torch.cat([batch[0] for batch in val])[:396]  # even: each rank predicts half, no padding
    torch.save((calibration, validation), tmp_path / "data.pt")
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    out = tmp_path / "out"
    out.mkdir()
    command = [PYTHON, str(SCRIPTS / "fp8_inference_ddp.py"), str(tmp_path / "weights.pt"), str(tmp_path), str(out)]
    env = script_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]

    # INC's names for rank r of 2, each rank its own measurements, read back by that rank when it quantized.
    files = set((out / "files.txt").read_text().split())
    for rank in (0, 1):
        assert {f"measure_hooks_maxabs_{rank}_2.npz", f"measure_hooks_maxabs_{rank}_2.json"} <= files, files
    assert not MEASUREMENT_FILES & files
    ranks = [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]
    assert all(r["layers"] == ["PatchedLinear", "ReLU", "PatchedLinear"] for r in ranks)
    two = torch.empty(len(validation), 10)
    for result in ranks:
        two[result["indices"]] = result["logits"]

    # One rank: measured on all the calibration data, quantized, the same validation samples.
    plugin = HPUPrecisionPlugin("fp8")
    single_model = copy.deepcopy(trained[0])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(validation), batch_size=64)
    plugin.convert_modules(single_model, inference=True, quant=False, fp8_data_path=tmp_path / "single")
    _trainer(plugin).test(single_model, train)
    plugin.convert_modules(single_model, inference=True, quant=True, fp8_data_path=tmp_path / "single")
    single = _logits(plugin, single_model, loader)
    bf16 = _logits(HPUPrecisionPlugin("bf16-mixed"), copy.deepcopy(trained[0]), loader)
    # Each rank's scales come from its half of the calibration data. With maxabs_hw scales (powers of two Gaudi
    # applies exactly) both halves gave the scales of the whole here: measured, the two runs' outputs are identical,
    # 0.024 from bf16. The bound allows other scales from a half, within fp8's rounding.
    assert _relative_error(two, single) < 0.03, _relative_error(two, single)
    assert 0.008 < _relative_error(two, bf16) < 0.06
    assert float((two.argmax(dim=1) == single.argmax(dim=1)).float().mean()) > 0.97


@pytest.mark.slow
def test_a_model_converted_before_the_processes_existed_is_refused_in_two(tmp_path: Path) -> None:
    # Its INC measurement files were named for one process; with two, each rank needs its own (see _fp8_inference).
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [PYTHON, str(SCRIPTS / "fp8_inference_two_ranks.py"), str(tmp_path)],
            env=script_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for proc in ranks:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert (
            "refused: fp8 inference runs in 2 processes, but convert_modules(inference=True) ran in one process, "
            "before they existed, so Intel Neural Compressor named its measurement files for one process." in out
        )
        assert "Call convert_modules(...) then: in the LightningModule's on_predict_start or on_test_start hook" in out


def test_the_inc_config_is_replaced_whole_so_a_rank_reading_it_never_sees_a_partial_file(tmp_path: Path) -> None:
    # The ranks of a run write the same config file in the shared fp8 data folder while others read it: a rank that
    # opened it before a rewrite must read the whole file it opened (in-place rewriting gave it an empty one).
    from lightning_accel.habana._fp8_inference import _write_json_atomically

    path = tmp_path / "inc_quantize_config.json"
    _write_json_atomically(path, {"mode": "QUANTIZE", "rank": 0})
    with path.open(encoding="utf-8") as reader:
        _write_json_atomically(path, {"mode": "QUANTIZE", "rank": 1})
        assert json.loads(reader.read()) == {"mode": "QUANTIZE", "rank": 0}
    assert json.loads(path.read_text(encoding="utf-8")) == {"mode": "QUANTIZE", "rank": 1}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
