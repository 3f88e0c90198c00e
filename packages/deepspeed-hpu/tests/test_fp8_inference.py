"""fp8 inference through Intel Neural Compressor under DeepSpeed tensor-parallel inference on two emulated HPUs.

The model converts itself in ``on_predict_start``, after DeepSpeed has split its layers: INC patches DeepSpeed's
``LinearLayer`` and ``LinearAllreduce`` slices, each rank measures into and quantizes from its own files, and the
quantized predictions are compared with fp8 inference of the whole model on one HPU (``HPUPrecisionPlugin``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _ds_hpu_helpers import run_script

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.deepspeed_hpu import HPUDeepSpeedPrecisionPlugin


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).norm() / expected.norm())


def _runs(out: Path, layout: str) -> list[dict[str, Any]]:
    """Measure, then quantize in a new run; the quantizing run's results, one per rank."""
    out.mkdir()
    for mode in ("measure", "quantize"):
        run_script("fp8_tensor_parallel.py", str(out), mode, layout)
    ranks = (0, 1) if layout == "tp" else (0,)
    return [torch.load(out / f"{layout}-quantize-rank{rank}.pt", weights_only=False) for rank in ranks]


@pytest.mark.slow
def test_tensor_parallel_ranks_measure_their_slices_into_their_own_files_and_predict_what_one_hpu_does(
    tmp_path: Path,
) -> None:
    tensor_parallel = _runs(tmp_path / "tp", "tp")
    single = _runs(tmp_path / "single", "single")[0]

    # INC's names for rank r of 2: each rank measured its own slices, and read them back when it quantized.
    files = set(tensor_parallel[0]["files"])
    for rank in (0, 1):
        assert {f"measure_hooks_maxabs_{rank}_2.npz", f"measure_hooks_maxabs_{rank}_2.json"} <= files, files
    assert not any(name.startswith("measure_hooks_maxabs.") for name in files)
    # INC patched DeepSpeed's column slice and its row slice with the all-reduce, not a plain Linear.
    assert tensor_parallel[0]["layers"] == {"l0": "PatchedLinear", "l1": "PatchedLinearAllReduce"}
    assert single["layers"] == {"l0": "PatchedLinear", "l1": "PatchedLinear"}

    # Both ranks of the group end with the whole output (the all-reduce after the row slice).
    torch.testing.assert_close(tensor_parallel[0]["predictions"], tensor_parallel[1]["predictions"], rtol=0, atol=0)
    predictions, expected = tensor_parallel[0]["predictions"], tensor_parallel[0]["expected"]
    # Measured: 0.0026 from one HPU's fp8 (each slice has scales of its own), 0.049 from float32 (as one HPU's fp8:
    # 0.049), so the layers really computed in fp8.
    assert _relative_error(predictions, single["predictions"]) < 0.02
    assert 0.01 < _relative_error(predictions, expected) < 0.1
    assert abs(_relative_error(predictions, expected) - _relative_error(single["predictions"], expected)) < 0.01


def test_a_module_partitioned_by_zero_3_is_refused_for_fp8_inference() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model[0].weight.ds_id = 0  # type: ignore[attr-defined]  # how ZeRO-3 marks a partitioned parameter
    with pytest.raises(
        ConfigurationError,
        match=r"parameters of Sequential are partitioned by ZeRO stage 3 \('0.weight' and 0 more\).*"
        r"tensor_parallel=\{'tp_size': N\}",
    ):
        HPUDeepSpeedPrecisionPlugin("fp8").convert_modules(model, inference=True, quant=False)
