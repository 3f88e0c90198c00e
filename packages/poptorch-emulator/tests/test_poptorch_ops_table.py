"""The table of operators poptorch 3.4 lowers (``poptorch_3_4_ops.json``) is what its generator reads from poptorch.

The table is generated from poptorch's sources at tag ``sdk/poptorch/3.4.0`` by ``data/generate_poptorch_ops.py``.
With a clone of graphcore/poptorch named by ``POPTORCH_SOURCE``, the generator runs again and must write the
committed table; without one that test is skipped and says so. The other tests hold the emulator to the table: the
losses it marks are losses poptorch lowers, and what poptorch has no rule for is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_accel.poptorch_emulator import lowering, tracing

pytestmark = pytest.mark.emulator_only

GENERATOR = Path(__file__).parent / "data" / "generate_poptorch_ops.py"
# The functional losses whose ATen operator has another name than the function.
_ATEN_NAME = {"cross_entropy": "cross_entropy_loss", "nll_loss": "nll_loss_nd"}


def test_the_committed_table_is_what_the_generator_reads_from_poptorch(tmp_path: Path) -> None:
    source = os.environ.get("POPTORCH_SOURCE")
    if not source:
        pytest.skip("set POPTORCH_SOURCE to a clone of https://github.com/graphcore/poptorch to regenerate the table")
    committed = lowering._TABLE.read_text()
    try:
        subprocess.run([sys.executable, str(GENERATOR), source], check=True, capture_output=True, text=True)
        assert lowering._TABLE.read_text() == committed
    finally:
        lowering._TABLE.write_text(committed)


def test_the_table_names_its_source_and_poptorchs_texts() -> None:
    table = json.loads(lowering._TABLE.read_text())
    assert table["source"].endswith("tag sdk/poptorch/3.4.0 (commit c2a8b17762f1d7106f7bf048ff011ab4fee7685e)")
    assert len(table["lowered"]) > 250
    assert table["messages"]["unsupported_ops"].startswith("Unsupported ops found in compiled model: [{ops}].")
    for loss in ("L1Loss", "MSELoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "CTCLoss"):
        assert loss in table["documented_losses"]


def test_every_loss_the_emulator_marks_has_a_lowering_rule() -> None:
    lowered = lowering.table()["lowered"]
    for function in tracing._LOSS_FUNCTIONS:
        assert _ATEN_NAME.get(function.__name__, function.__name__) in lowered, function.__name__


@pytest.mark.parametrize(
    ("op", "lowered"),
    [
        (torch.ops.aten.addmm.default, True),
        (torch.ops.aten.add_.Tensor, True),  # renamed to aten::add by the in-place pass
        (torch.ops.aten.fill_.Scalar, True),  # renamed to aten::full_like
        (torch.ops.aten._to_copy.default, True),  # a composite: reaches the IPU as empty + copy_
        (torch.ops.aten._native_batch_norm_legit.default, True),  # torch 2.0.1's native_batch_norm
        (torch.ops.aten.huber_loss.default, False),
        (torch.ops.aten.multi_margin_loss.default, False),
        (torch.ops.aten.linalg_inv_ex.default, False),  # structured: its functional form calls its out= form
        (torch.ops.aten.select_scatter.default, False),  # intercepted by poptorch, with no handler
    ],
)
def test_what_poptorch_lowers(op: torch._ops.OpOverload, lowered: bool) -> None:
    assert lowering.lowers(op) is lowered
