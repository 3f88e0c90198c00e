"""HPUPrecisionPlugin on the SDK's autocast: per-ATen-operator dtypes, the SDK's lists read once at load, bad input.

Mixed precision on HPUs is the SDK's ``torch.autocast(device_type="hpu")``: its lower-precision and float32 lists
(ATen names, the defaults of gaudi-pytorch-bridge ``autocast_helpers.h`` unless ``PT_HPU_AUTOCAST_*_OPS_LIST`` named
files when the SDK loaded) decide each operator's dtype. The lists are read once per process, so the tests that
change them start a child process (``scripts/autocast_probe.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _habana_helpers import PYTHON, SCRIPTS, script_env
from lightning.fabric import Fabric
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin, sdk
from lightning_accel.habana.fabric import HPUPrecision

LIST_VARIABLES = ("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", "PT_HPU_AUTOCAST_FP32_OPS_LIST")

_spec = importlib.util.spec_from_file_location("autocast_probe", SCRIPTS / "autocast_probe.py")
assert _spec is not None and _spec.loader is not None
autocast_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(autocast_probe)

# The probe's operators under the SDK's default lists (bf16 autocast, float32 inputs unless the name says bf16).
DEFAULT_DTYPES = {
    "linear": "bfloat16",  # lower list
    "matmul": "bfloat16",
    "mm": "bfloat16",
    "softmax": "bfloat16",
    "log_softmax": "bfloat16",
    "cross_entropy_loss": "float32",  # fp32 list
    "cross_entropy_loss_of_bf16": "float32",
    "layer_norm": "bfloat16",  # lower list, first input only
    "mul": "bfloat16",  # lower list (wins over the promote set)
    "add_bf16_fp32": "float32",  # promote: the widest input
    "exp": "float32",  # fp32 list
    "relu": "float32",  # in no list: runs on its inputs as they are
    "relu_of_bf16": "bfloat16",
}
# Custom lists: lower "linear, add", fp32 "softmax, matmul". Each replaces its category's default list.
CUSTOM_LOWER = "linear\nadd\n"
CUSTOM_FP32 = "softmax\nmatmul\n"
CUSTOM_DTYPES = {
    **DEFAULT_DTYPES,
    "matmul": "float32",  # now in the fp32 list
    "softmax": "float32",
    "mm": "float32",  # no longer in any list: its float32 inputs as they are
    "log_softmax": "float32",
    "layer_norm": "float32",
    "cross_entropy_loss_of_bf16": "bfloat16",
    "mul": "float32",  # no longer lower: promote, float32 inputs
    "add_bf16_fp32": "bfloat16",  # now in the lower list
}


@pytest.fixture
def default_lists() -> None:
    """This process's SDK loaded (now at the latest) without custom lists, so it has the SDK's defaults."""
    for variable in LIST_VARIABLES:
        if os.environ.get(variable):
            pytest.skip(f"{variable} is set in the test environment; these tests need the SDK's default lists")
    sdk.ht_module()


class DtypeProbe(LightningModule):
    """Records the dtype each operation produced inside training_step, and the gradients' dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(16, 32)
        self.out = torch.nn.Linear(32, 4)
        self.dtypes: dict[str, set[torch.dtype]] = {}
        self.devices: set[str] = set()
        self.grad_dtypes: set[torch.dtype] = set()
        self.losses: list[float] = []

    def _seen(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        self.dtypes.setdefault(name, set()).add(tensor.dtype)
        self.devices.add(tensor.device.type)
        return tensor

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = self._seen("linear", self.hidden(x))
        h = self._seen("relu", torch.relu(h))  # no list: as its (bfloat16) input
        scores = self._seen("matmul", h @ self.out.weight.T)
        logits = self._seen("linear_out", self.out(h))
        self._seen("softmax", torch.softmax(logits, dim=-1))
        self._seen("log_softmax", torch.log_softmax(logits, dim=-1))
        self._seen("sigmoid_of_fp32", torch.sigmoid(x))  # no list: as its (float32) input
        loss = self._seen("cross_entropy", F.cross_entropy(logits, y))
        self.losses.append(loss.item())
        return loss + 0.0 * scores.float().sum()

    def on_after_backward(self) -> None:
        self.grad_dtypes.update(p.grad.dtype for p in self.parameters() if p.grad is not None)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-2)


def _loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=generator)
    y = (x[:, :4].argmax(dim=1)).long()
    return DataLoader(TensorDataset(x, y), batch_size=32)


def _fit(**trainer_kwargs: Any) -> DtypeProbe:
    torch.manual_seed(0)
    model = DtypeProbe()
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{"max_epochs": 3, **trainer_kwargs},
    )
    trainer.fit(model, _loader())
    return model


def _run_probe(*args: str, **env: str) -> dict[str, Any]:
    result = subprocess.run(
        [PYTHON, str(SCRIPTS / "autocast_probe.py"), *args],
        env=script_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_bf16_mixed_casts_per_aten_operator_and_converges_like_fp32(default_lists: None) -> None:
    mixed = _fit(precision="bf16-mixed")
    assert type(mixed.trainer.precision_plugin) is HPUPrecisionPlugin
    assert mixed.devices == {"hpu"}
    assert mixed.dtypes == {
        "linear": {torch.bfloat16},
        "relu": {torch.bfloat16},
        "matmul": {torch.bfloat16},
        "linear_out": {torch.bfloat16},
        "softmax": {torch.bfloat16},
        "log_softmax": {torch.bfloat16},
        "sigmoid_of_fp32": {torch.float32},
        "cross_entropy": {torch.float32},
    }
    # Casts are recorded by autograd: gradients reach the float32 weights in float32; the weights stay float32.
    assert mixed.grad_dtypes == {torch.float32}
    assert mixed.hidden.weight.dtype == torch.float32

    reference = _fit(precision="32-true")
    assert reference.dtypes["linear"] == {torch.float32}
    first, last = sum(mixed.losses[:8]) / 8, sum(mixed.losses[-8:]) / 8  # the first and the last epoch
    assert last < 0.5 * first, (first, last)
    assert last == pytest.approx(sum(reference.losses[-8:]) / 8, rel=0.05, abs=0.02)


def test_autocast_matches_the_sdk_default_lists(default_lists: None) -> None:
    with sdk.autocast(torch.bfloat16):
        assert autocast_probe.probe() == DEFAULT_DTYPES
        with sdk.disable_casts():
            assert set(autocast_probe.probe().values()) == {"float32", "bfloat16"}  # only the explicit bf16 inputs
            assert autocast_probe.probe()["linear"] == "float32"
    x = torch.randn(2, 4, device="hpu")
    with torch.autocast(device_type="hpu", dtype=torch.float16):
        assert (torch.mm(x, x.T).dtype, torch.exp(x).dtype) == (torch.float16, torch.float32)
        # A promote operator meeting two lower dtypes is ATen's error (at::autocast::prioritize), as on Gaudi.
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast::prioritize"):
            torch.add(x.half(), x.bfloat16())


def test_lists_from_the_environment_at_start_replace_the_defaults_and_are_read_once(tmp_path: Path) -> None:
    lower, fp32 = tmp_path / "lower.txt", tmp_path / "fp32.txt"
    lower.write_text(CUSTOM_LOWER + "not_an_op\n")  # a name that is no operator matches nothing, as on the SDK
    fp32.write_text(CUSTOM_FP32)
    result = _run_probe("env", **dict(zip(LIST_VARIABLES, (str(lower), str(fp32)), strict=True)))
    assert result["dtypes"] == CUSTOM_DTYPES
    assert result["unchanged_after_load"] is True


def test_plugin_file_paths_reach_the_sdk_when_given_before_it_loads(tmp_path: Path) -> None:
    lower, fp32 = tmp_path / "lower.txt", tmp_path / "fp32.txt"
    lower.write_text(CUSTOM_LOWER)
    fp32.write_text(CUSTOM_FP32)
    # Without autoload (lazy mode does the same), the SDK loads after the plugin is built.
    env = {variable: "" for variable in LIST_VARIABLES} | {"PT_HPU_AUTOLOAD": "0"}
    result = _run_probe("plugin", str(lower), str(fp32), **env)
    assert result["loaded_before_plugin"] is False
    assert result["exported"] == dict(zip(LIST_VARIABLES, (str(lower.resolve()), str(fp32.resolve())), strict=True))
    assert result["dtypes"] == CUSTOM_DTYPES


def test_plugin_built_after_the_sdk_loaded_other_lists_gives_the_export_lines(
    default_lists: None, tmp_path: Path
) -> None:
    lower, fp32 = tmp_path / "ops_bf16.txt", tmp_path / "ops_fp32.txt"
    lower.write_text(CUSTOM_LOWER)
    fp32.write_text(CUSTOM_FP32)
    with pytest.raises(ConfigurationError) as info:
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=lower, fp32_file_path=fp32)
    lower_path, fp32_path = lower.resolve(), fp32.resolve()
    assert str(info.value) == (
        f"The operator lists given to the precision plugin ({lower_path}, {fp32_path}) cannot reach the SDK: the "
        "Habana SDK has already loaded, and it reads its autocast operator lists once, when it loads (at `import "
        "torch` in eager mode, the default), from the files these variables named then "
        "(PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST unset, PT_HPU_AUTOCAST_FP32_OPS_LIST unset). Set the variables "
        "before the process starts:\n"
        f"    export PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST={lower_path}\n"
        f"    export PT_HPU_AUTOCAST_FP32_OPS_LIST={fp32_path}\n"
        "and pass the same files to the plugin (or leave its file arguments out)."
    )
    with pytest.raises(ConfigurationError, match="Set the variables before the process starts"):
        HPUPrecision("bf16-mixed", fp32_file_path=fp32)
    assert not any(os.environ.get(variable) for variable in LIST_VARIABLES)


def test_plugin_accepts_the_lists_the_sdk_loaded(
    default_lists: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the variables had named these files at start: the plugin's files are those (or list the same names).
    lower = tmp_path / "ops_bf16.txt"
    lower.write_text(CUSTOM_LOWER)
    copy = tmp_path / "copy.txt"
    copy.write_text("add\n# the same names\nlinear\n")
    monkeypatch.setenv(LIST_VARIABLES[0], str(lower))
    assert HPUPrecisionPlugin("bf16-mixed", bf16_file_path=lower).lower_ops == frozenset({"linear", "add"})
    assert HPUPrecisionPlugin("bf16-mixed", bf16_file_path=copy).lower_ops == frozenset({"linear", "add"})


def test_the_sdk_default_list_names_are_accepted(default_lists: None, tmp_path: Path) -> None:
    # A copy of the SDK's default float32 list, with its ATen names (cross_entropy_loss) and Python ones (truediv).
    names = "cross_entropy_loss\nnll_loss\ntruediv\ntrue_divide\nembedding_bag\n"
    path = tmp_path / "fp32.txt"
    path.write_text(names)
    with pytest.raises(ConfigurationError, match="Set the variables before the process starts"):
        HPUPrecisionPlugin("bf16-mixed", fp32_file_path=path)  # accepted names; only the timing is refused


def test_precision_16_maps_to_16_mixed_float16(default_lists: None) -> None:
    plugin = HPUPrecisionPlugin(16)
    assert plugin.precision == "16-mixed"
    model = _fit(precision=16, max_epochs=1)
    assert model.dtypes["linear"] == {torch.float16}
    assert model.dtypes["cross_entropy"] == {torch.float32}


def test_bf16_true_keeps_bfloat16_weights() -> None:
    model = _fit(precision="bf16-true", max_epochs=1)
    assert model.hidden.weight.dtype == torch.bfloat16
    assert model.dtypes["softmax"] == {torch.bfloat16}


def test_optimizer_step_runs_without_autocast(default_lists: None) -> None:
    seen: list[torch.dtype] = []

    class Recording(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            loss = super().step(closure)
            weight = self.param_groups[0]["params"][0]
            seen.append(torch.nn.functional.linear(torch.ones(1, weight.shape[1], device=weight.device), weight).dtype)
            return loss

    class Model(DtypeProbe):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return Recording(self.parameters(), lr=0.1)

    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[HPUPrecisionPlugin("bf16-mixed")],
    )
    model = Model()
    trainer.fit(model, _loader())
    assert model.dtypes["linear"] == {torch.bfloat16}
    assert seen == [torch.float32, torch.float32]


def test_fabric_bf16_mixed_autocasts_forward_and_not_the_step(default_lists: None) -> None:
    seen: list[torch.dtype] = []

    class Recording(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            weight = self.param_groups[0]["params"][0]
            seen.append(F.linear(torch.ones(1, weight.shape[1], device=weight.device), weight).dtype)
            return super().step(closure)

    fabric = Fabric(accelerator="hpu", devices=1, precision="bf16-mixed")
    assert type(fabric.strategy.precision) is HPUPrecision
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    model, optimizer = fabric.setup(model, Recording(model.parameters(), lr=0.1))
    x = torch.randn(4, 16, device=fabric.device)
    y = torch.zeros(4, dtype=torch.long, device=fabric.device)
    logits = model(x)
    assert (logits.device.type, logits.dtype) == ("hpu", torch.bfloat16)
    with fabric.autocast():
        loss = F.cross_entropy(logits, y)
    assert loss.dtype == torch.float32
    fabric.backward(loss)
    assert model.weight.grad.dtype == torch.float32
    optimizer.step()
    assert seen == [torch.float32]


def test_opt_level_o2_and_verbose_are_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        HPUPrecisionPlugin("bf16-mixed", opt_level="O2")
    assert str(info.value) == (
        "opt_level='O2' is not supported. Accepted: 'O1' (the default): HPU mixed precision is the SDK's "
        "torch.autocast(device_type='hpu'), which casts only the operators of its lists and has no other level (O2 "
        "was Habana Mixed Precision's, removed from the SDK). To run more operators in the lower precision, list "
        "their ATen names in bf16_file_path."
    )
    with pytest.raises(ConfigurationError) as info:
        HPUPrecision("bf16-mixed", verbose=True)
    assert str(info.value) == (
        "verbose=True is not supported. Accepted: verbose=False (the default): the SDK's "
        "torch.autocast(device_type='hpu') does not report its cast decisions. To see which dtype an operator ran "
        "in, look at the dtype of its output."
    )
    with pytest.raises(ConfigurationError, match=r"opt_level='O3' is not supported. Accepted: 'O1'"):
        HPUPrecisionPlugin("bf16-mixed", opt_level="O3")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("linear, relu\n", r"line 1: 'linear, relu' is not an operator name"),
        ("linear\nsoftmaxx\n", r"line 2: 'softmaxx' is not an ATen operator. Did you mean 'softmax'"),
        ("cross_entropy\n", r"'cross_entropy' is not an ATen operator. Did you mean 'cross_entropy_loss'"),
        ("linear \n", r"line 1: 'linear ' has spaces or a line ending"),
        ("linear\r\nmm\r\n", r"line 1: 'linear\\r' has spaces or a line ending"),
        ("add_\n", r"'add_' is an in-place, out= or backward operator"),
    ],
)
def test_malformed_or_unknown_lists_are_clear_errors(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "ops.txt"
    path.write_bytes(content.encode())
    with pytest.raises(ConfigurationError, match=match):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=path)


def test_missing_list_file_names_the_argument(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"fp32_file_path='.*nope.txt': no such file"):
        HPUPrecisionPlugin("bf16-mixed", fp32_file_path=tmp_path / "nope.txt")


def test_unreadable_list_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.txt"
    path.write_bytes(b"\xff\xfe\x00linear")
    with pytest.raises(ConfigurationError, match=r"bf16_file_path=.* cannot be read"):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=path)


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    bf16 = tmp_path / "ops_bf16.txt"
    bf16.write_text("linear\n")
    with pytest.raises(ConfigurationError, match=r"precision='64-true' is not supported on HPUs"):
        HPUPrecisionPlugin("64-true")
    with pytest.raises(ConfigurationError, match=r"need a mixed precision"):
        HPUPrecisionPlugin("32-true", bf16_file_path=bf16)
    both = tmp_path / "both.txt"
    both.write_text("linear\n")
    with pytest.raises(ConfigurationError, match=r"linear appear in both"):
        HPUPrecisionPlugin("bf16-mixed", bf16_file_path=bf16, fp32_file_path=both)
    with pytest.raises(ConfigurationError, match=r"precision='64-true' is not supported on HPUs"):
        Trainer(accelerator="hpu", devices=1, precision="64-true")


@pytest.mark.parametrize(
    ("precision", "hint"),
    [
        ("16-true", "'16-mixed' computes in float16 with float32 weights, and 'bf16-true' gives 16-bit weights"),
        ("transformer-engine", "Gaudi's fp8 training is the SDK's Transformer Engine (Gaudi2 and later)"),
        ("64-true", "Gaudi has no float64"),
    ],
)
def test_a_refused_precision_names_what_to_use_instead(precision: str, hint: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        HPUPrecisionPlugin(precision)
    assert str(refused.value).startswith(f"precision={precision!r} is not supported on HPUs. Accepted: 'bf16-mixed'")
    assert hint in str(refused.value)
    if precision == "16-true":  # Lightning's HalfPrecision, swapped for the HPU plugin by the strategy
        with pytest.raises(ConfigurationError, match=re.escape(hint)):
            Trainer(accelerator="hpu", devices=1, precision=precision)
    if precision == "transformer-engine":  # refused before Lightning's plugin asks to install NVIDIA's library
        for entry, build in (("Trainer", Trainer), ("Fabric", Fabric)):
            for variant in (precision, "transformer-engine-float16"):
                with pytest.raises(ConfigurationError) as refused:
                    build(accelerator="hpu", devices=2, precision=variant)
                message = str(refused.value)
                assert message.startswith(f"{entry}(accelerator='hpu', precision={variant!r}) is not supported.")
                assert hint in message and "plugins=[HPUPrecision('fp8')] with Fabric" in message
