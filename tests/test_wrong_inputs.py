# ruff: noqa: E501 - a table of cases reads best with one case per entry, code and expectations whole
"""Every family of wrong input gets a clear error: its type, and a message naming the argument and the value.

The cases run in one child process (tests/scripts/wrong_inputs.py) on the emulators, each in a fresh namespace; every
case must raise the expected type with each of the expected pieces in its message (the argument with the value as the
user wrote it, and what is accepted). Errors that are Lightning's own are listed where Lightning's message already
names the argument and value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "wrong_inputs.py"

H = "from lightning_accel.habana import HPUPrecisionPlugin, HPUProfiler, HPUAccelerator, HPUCheckpointIO\n"
D = "from lightning_accel.deepspeed_hpu import HPUDeepSpeedStrategy\n"
G = "from lightning_accel.graphcore import IPUStrategy\n"
ENV = "from lightning_accel.core import emulation\n"

# id: (code, expected exception type, pieces the message must contain)
CASES: dict[str, tuple[str, str, list[str]]] = {
    # --- devices and num_nodes ---
    "hpu-devices-0": (
        "Trainer(accelerator='hpu', devices=0)",
        "MisconfigurationException",
        ["Trainer(devices=0) is not accepted with accelerator='hpu'", "Accepted: a positive int", "accelerator='cpu'"],
    ),
    "fabric-hpu-devices-0-string": (
        "Fabric(accelerator='hpu', devices='0')",
        "ConfigurationError",
        ["Fabric(devices='0') is not accepted with accelerator='hpu'", "Accepted"],
    ),
    "hpu-devices-negative": (
        "Trainer(accelerator='hpu', devices=-3)",
        "ConfigurationError",
        ["devices=-3", "Accepted"],
    ),
    "hpu-devices-word": (
        "Trainer(accelerator='hpu', devices='many')",
        "ConfigurationError",
        ["devices='many'", "Accepted"],
    ),
    "hpu-devices-float": ("Trainer(accelerator='hpu', devices=1.5)", "ConfigurationError", ["devices=1.5", "Accepted"]),
    "hpu-devices-too-many": (
        "Trainer(accelerator='hpu', devices=9)",
        "ConfigurationError",
        ["devices=9", "Accepted: 1 to 8"],
    ),
    "hpu-devices-list": (
        "Trainer(accelerator='hpu', devices=[0, 99])",
        "ConfigurationError",
        ["devices=[0, 99]", "Accepted"],
    ),
    "hpu-num-nodes-0": ("Trainer(accelerator='hpu', devices=1, num_nodes=0)", "ValueError", ["num_nodes", "0"]),
    "fabric-hpu-devices-word": (
        "Fabric(accelerator='hpu', devices='many')",
        "ConfigurationError",
        ["devices='many'", "Accepted"],
    ),
    "ipu-devices-0": (
        "Trainer(accelerator='ipu', devices=0)",
        "ConfigurationError",
        ["Trainer(devices=0) is not accepted with accelerator='ipu'", "-1 for every visible IPU"],
    ),
    "ipu-devices-too-many": (
        "Trainer(accelerator='ipu', devices=16)",
        "ConfigurationError",
        ["devices=16", "Accepted: 1, 2, 4, 8"],
    ),
    "ipu-devices-word": (
        "Trainer(accelerator='ipu', devices='all of them')",
        "ConfigurationError",
        ["devices='all of them'", "Accepted"],
    ),
    "ipu-devices-list": (
        "Trainer(accelerator='ipu', devices=[0, 1])",
        "ConfigurationError",
        ["devices=[0, 1]", "Pass an int"],
    ),
    # --- precision strings and operator lists ---
    "precision-unknown": (
        "Trainer(accelerator='hpu', devices=1, precision='fp12')",
        "ValueError",
        ["'fp12'", "Allowed precision values"],
    ),
    "hpu-plugin-precision": (
        H + "HPUPrecisionPlugin(precision='64-true')",
        "ConfigurationError",
        ["precision='64-true'", "Accepted"],
    ),
    "ipu-precision": (
        "fit(accelerator='ipu', devices=1, precision='64-true')",
        "ConfigurationError",
        ["precision='64-true'", "Accepted"],
    ),
    "oplist-missing": (
        H + "HPUPrecisionPlugin('bf16-mixed', bf16_file_path='no_such.txt')",
        "ConfigurationError",
        ["bf16_file_path='no_such.txt': no such file", "Accepted"],
    ),
    "oplist-directory": (
        H + "os.makedirs('adir', exist_ok=True)\nHPUPrecisionPlugin('bf16-mixed', fp32_file_path='adir')",
        "ConfigurationError",
        ["fp32_file_path='adir': a directory, not a file", "Accepted"],
    ),
    "oplist-malformed": (
        H + "open('bad.txt', 'w').write('add mul, div\\n')\nHPUPrecisionPlugin('bf16-mixed', bf16_file_path='bad.txt')",
        "ConfigurationError",
        ["bf16_file_path='bad.txt', line 1", "Accepted"],
    ),
    "oplist-unknown-op": (
        H
        + "open('unk.txt', 'w').write('no_such_operator\\n')\nHPUPrecisionPlugin('bf16-mixed', bf16_file_path='unk.txt')",
        "ConfigurationError",
        ["bf16_file_path='unk.txt', line 1", "'no_such_operator' is not an ATen operator", "Accepted"],
    ),
    "oplist-in-both": (
        H
        + "open('a.txt', 'w').write('matmul\\n')\nHPUPrecisionPlugin('bf16-mixed', bf16_file_path='a.txt', fp32_file_path='a.txt')",
        "ConfigurationError",
        ["matmul", "bf16_file_path='a.txt'", "fp32_file_path='a.txt'", "Accepted"],
    ),
    "oplist-without-mixed": (
        H + "open('b.txt', 'w').write('matmul\\n')\nHPUPrecisionPlugin('32-true', bf16_file_path='b.txt')",
        "ConfigurationError",
        ["bf16_file_path", "precision='32-true'"],
    ),
    # --- strategy and accelerator pairings ---
    "cpu-hpu-parallel": (
        "fit(accelerator='cpu', devices=2, strategy='hpu_parallel')",
        "ConfigurationError",
        ["HPUParallelStrategy runs on HPUs", "CPUAccelerator", "Accepted: accelerator='hpu'"],
    ),
    "cpu-hpu-single": (
        "fit(accelerator='cpu', devices=1, strategy='hpu_single')",
        "ConfigurationError",
        ["SingleHPUStrategy runs on HPUs", "CPUAccelerator", "Accepted: accelerator='hpu'"],
    ),
    "ipu-hpu-single": (
        "fit(accelerator='ipu', devices=1, strategy='hpu_single')",
        "ConfigurationError",
        ["SingleHPUStrategy runs on HPUs", "IPUAccelerator", "Accepted: accelerator='hpu'"],
    ),
    "fabric-cpu-hpu-single": (
        "Fabric(accelerator='cpu', devices=1, strategy='hpu_single').launch()",
        "ConfigurationError",
        ["SingleHPUStrategy runs on HPUs", "CPUAccelerator"],
    ),
    "cpu-hpu-deepspeed": (
        "fit(accelerator='cpu', devices=1, strategy='hpu_deepspeed')",
        "ConfigurationError",
        ["HPUDeepSpeedStrategy runs on HPUs", "CPUAccelerator"],
    ),
    "hpu-ipu-strategy": (
        G + "fit(accelerator='hpu', devices=1, strategy=IPUStrategy())",
        "ConfigurationError",
        ["device=device(type='cpu')", "Accepted: torch.device('hpu')"],
    ),
    "hpu-plugin-on-ipu": (
        H + "fit(accelerator='ipu', devices=1, plugins=[HPUPrecisionPlugin('bf16-mixed')])",
        "ConfigurationError",
        ["HPUPrecisionPlugin cannot run on IPUs", "precision='32-true'"],
    ),
    "deepspeed-hpu-plugin": (
        H
        + D
        + "fit(accelerator='hpu', devices=1, strategy=HPUDeepSpeedStrategy(), plugins=[HPUPrecisionPlugin('bf16-mixed')])",
        "ConfigurationError",
        ["precision plugin HPUPrecisionPlugin", "Accepted: HPUDeepSpeedPrecisionPlugin"],
    ),
    "hpu-setup-cpu-device": (
        H + "HPUAccelerator().setup_device(torch.device('cpu'))",
        "ConfigurationError",
        ["device=device(type='cpu')", "Accepted: torch.device('hpu')"],
    ),
    # --- environment variables ---
    "env-emulate": (
        ENV
        + "os.environ['LIGHTNING_ACCEL_EMULATE'] = 'gpu'\nemulation.reset_emulation_settings()\nemulation.emulation_settings()",
        "ConfigurationError",
        ["LIGHTNING_ACCEL_EMULATE='gpu'", "Accepted"],
    ),
    "env-emulated-devices": (
        ENV
        + "os.environ['LIGHTNING_ACCEL_EMULATED_DEVICES'] = 'zero'\nemulation.reset_emulation_settings()\nemulation.emulation_settings()",
        "ConfigurationError",
        ["LIGHTNING_ACCEL_EMULATED_DEVICES='zero'", "Accepted"],
    ),
    "env-emulate-backend": (
        ENV
        + "os.environ['LIGHTNING_ACCEL_EMULATE_BACKEND'] = 'tpu'\nemulation.reset_emulation_settings()\nemulation.emulation_settings()",
        "ConfigurationError",
        ["LIGHTNING_ACCEL_EMULATE_BACKEND='tpu'", "Accepted"],
    ),
    "env-rank-watch": (
        "from lightning_accel.core.rank_watch import watch_interval\nos.environ['LIGHTNING_ACCEL_RANK_WATCH_INTERVAL'] = 'soon'\nwatch_interval()",
        "ConfigurationError",
        ["LIGHTNING_ACCEL_RANK_WATCH_INTERVAL='soon'", "Accepted"],
    ),
    "env-disable-unknown-plugin": (
        "import warnings\nfrom lightning_accel.core import discovery\nos.environ['LIGHTNING_ACCEL_DISABLE'] = 'habanna'\n"
        "discovery.reset_discovery()\ntry:\n    with warnings.catch_warnings():\n        warnings.simplefilter('error', discovery.UnknownPluginNameWarning)\n"
        "        discovery.discovered_plugins()\nfinally:\n    discovery.reset_discovery()",
        "UnknownPluginNameWarning",
        ["LIGHTNING_ACCEL_DISABLE='habanna'", "Installed plugins: deepspeed_hpu, graphcore, habana", "Fix the name"],
    ),
    # --- profiler settings ---
    "profiler-dirpath-file": (
        H + "open('pfile', 'w').write('x')\nHPUProfiler(dirpath='pfile')",
        "ConfigurationError",
        ["HPUProfiler(dirpath='pfile') is a file", "Accepted"],
    ),
    "profiler-activities": (
        H + "fit(accelerator='hpu', devices=1, profiler=HPUProfiler(dirpath='prof', activities=['GPU']))",
        "ConfigurationError",
        ["activities=", "'GPU'", "Accepted"],
    ),
    "checkpoint-storage-options": (
        H + "HPUCheckpointIO().save_checkpoint({}, 'x.ckpt', storage_options={'a': 1})",
        "TypeError",
        ["storage_options={'a': 1}", "Remove `storage_options`"],
    ),
    # --- DeepSpeed configs and arguments ---
    "ds-config-missing": (
        D + "HPUDeepSpeedStrategy(config='no_such.json')",
        "ConfigurationError",
        ["config='no_such.json': no such file", "Accepted"],
    ),
    "ds-config-directory": (
        D + "os.makedirs('cdir', exist_ok=True)\nHPUDeepSpeedStrategy(config='cdir')",
        "ConfigurationError",
        ["config='cdir': a directory, not a file", "Accepted"],
    ),
    "ds-config-malformed": (
        D + "open('bad.json', 'w').write('{stage: 2')\nHPUDeepSpeedStrategy(config='bad.json')",
        "ConfigurationError",
        ["config='bad.json' is not valid JSON", "Fix"],
    ),
    "ds-config-type": (D + "HPUDeepSpeedStrategy(config=42)", "ConfigurationError", ["config=42", "Accepted"]),
    "ds-stage": (D + "HPUDeepSpeedStrategy(stage=5)", "ConfigurationError", ["stage=5", "Accepted"]),
    "ds-stage-against-config": (
        D + "HPUDeepSpeedStrategy(stage=3, config={'zero_optimization': {'stage': 2}})",
        "ConfigurationError",
        ["stage=3", "zero_optimization.stage=2", "Fix"],
    ),
    "ds-offload-optimizer-device": (
        D + "HPUDeepSpeedStrategy(offload_optimizer=True, offload_optimizer_device='gpu')",
        "ConfigurationError",
        ["offload_optimizer_device='gpu'", "Accepted"],
    ),
    "ds-offload-params-device": (
        D + "HPUDeepSpeedStrategy(stage=3, offload_parameters=True, offload_params_device='hpu')",
        "ConfigurationError",
        ["offload_params_device='hpu'", "Accepted"],
    ),
    "ds-tp-zero": (
        D + "HPUDeepSpeedStrategy(tensor_parallel={'tp_size': 0})",
        "ConfigurationError",
        ["tensor_parallel={'tp_size': 0}", "Accepted"],
    ),
    "ds-tp-word": (
        D + "HPUDeepSpeedStrategy(tensor_parallel={'tp_size': 'two'})",
        "ConfigurationError",
        ["tensor_parallel={'tp_size': 'two'}", "Accepted"],
    ),
    "ds-tp-not-dividing": (
        D
        + "Trainer(accelerator='hpu', devices=1, strategy=HPUDeepSpeedStrategy(tensor_parallel={'tp_size': 2}), **quiet).predict(BoringModel(), BoringModel().val_dataloader())",
        "ConfigurationError",
        ["tensor_parallel={'tp_size': 2}", "divisor of the number of processes (1 ="],
    ),
    # --- IPU counts, options, report directories ---
    "ipu-device-iterations": (
        G + "IPUStrategy(device_iterations=0)",
        "ConfigurationError",
        ["device_iterations=0", "positive int"],
    ),
    "ipu-training-opts": (
        G + "IPUStrategy(training_opts={'replication': 2})",
        "ConfigurationError",
        ["training_opts={'replication': 2}", "poptorch.Options"],
    ),
    "ipu-inference-opts": (
        G + "IPUStrategy(inference_opts='fast')",
        "ConfigurationError",
        ["inference_opts='fast'", "poptorch.Options"],
    ),
    "ipu-autoreport": (
        G + "IPUStrategy(autoreport='yes')",
        "ConfigurationError",
        ["autoreport='yes'", "True or False"],
    ),
    "ipu-autoreport-dir-type": (
        G + "IPUStrategy(autoreport_dir=3)",
        "ConfigurationError",
        ["autoreport_dir=3", "directory path"],
    ),
    "ipu-autoreport-dir-is-a-file": (
        "open('report.txt', 'w').close()\n" + G + "IPUStrategy(autoreport_dir='report.txt')",
        "ConfigurationError",
        ["autoreport_dir='report.txt'", "is a file", "directory path"],
    ),
    "ipu-autoreport-dir-under-a-file": (
        "open('notes', 'w').close()\n" + G + "IPUStrategy(autoreport_dir='notes/reports')",
        "ConfigurationError",
        ["autoreport_dir='notes/reports'", "is inside 'notes', which is a file"],
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("wrong_inputs")
    (work / "cases.json").write_text(json.dumps({case_id: code for case_id, (code, _, _) in CASES.items()}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(LIGHTNING_ACCEL_EMULATE="all", DS_ACCELERATOR="hpu", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "cases.json", "outcomes.json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads((work / "outcomes.json").read_text())
    return result


def test_the_battery_is_large_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case_id", list(CASES))
def test_wrong_input_is_refused_naming_the_argument(outcomes: dict[str, Any], case_id: str) -> None:
    _, expected_type, pieces = CASES[case_id]
    raised = outcomes[case_id]
    assert raised is not None, f"{case_id}: ran without an error"
    assert expected_type in raised["bases"], (
        f"{case_id}: raised {raised['type']}: {raised['message']}\n{raised['where']}"
    )
    for piece in pieces:
        assert piece in raised["message"], f"{case_id}: {piece!r} not in {raised['message']!r}"
