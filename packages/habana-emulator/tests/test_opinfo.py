"""The emulated ``"hpu"`` against torch's own operator database (OpInfo), case by case against the CPU.

Each OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that supports float32 or bfloat16 on
the CPU is run on every sample input in that dtype, forward and (where the OpInfo supports autograd) backward, on
``"hpu"`` and on the CPU (see ``_opinfo_harness``). ``test_operator`` passes when every case conforms, except the
cases of the known-failure table (``data/opinfo_known_failures.json``), which ``test_known_failures`` runs as strict
expected failures: such a group fails the run when one of its cases starts passing (remove it from the table then).

Which OpInfos run is chosen by ``LIGHTNING_ACCEL_OPINFO``: ``all`` (the ``hpu_opinfo`` nox session), or ``sample``
(the default: a fixed, seeded sample of :data:`SAMPLE_SIZE` OpInfo-dtype pairs, so that the emulator's suite keeps a
quick conformance check). The known-failure groups run in both. The pass rates are printed at the end of the session
(``_opinfo_report``).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _opinfo_harness import DTYPES, CaseResult, all_ops, dtypes_of, run_cases
from _opinfo_report import PROPERTY, counts_of

# Compares the emulator's device with the CPU: on a Gaudi the operators run on the card's kernels, whose numerics are
# not the CPU's (see docs/emulator.md).
pytestmark = pytest.mark.emulator_only

TABLE = Path(__file__).parent / "data" / "opinfo_known_failures.json"
MODE_VAR = "LIGHTNING_ACCEL_OPINFO"
MODES = ("sample", "all")
SAMPLE_SIZE = 120
SAMPLE_SEED = 21


class KnownFailure(AssertionError):
    """A case of the known-failure table failed, as the table says it does."""


def _mode() -> str:
    mode = os.environ.get(MODE_VAR, "sample")
    if mode not in MODES:
        raise ValueError(
            f"{MODE_VAR}={mode!r} is not one of {', '.join(MODES)}: 'all' runs every OpInfo, 'sample' a part"
        )
    return mode


def _table() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = json.loads(TABLE.read_text())["failures"]
    return groups


def _known() -> dict[tuple[str, str], dict[str, set[int]]]:
    """The table's cases: ``(op, dtype) -> {direction: sample indices}``."""
    known: dict[tuple[str, str], dict[str, set[int]]] = {}
    for group in _table():
        by_direction = known.setdefault((group["op"], group["dtype"]), {})
        by_direction.setdefault(group["direction"], set()).update(group["samples"])
    return known


def _items() -> list[tuple[str, str]]:
    items = [(name, dtype) for name, op in sorted(all_ops().items()) for dtype in dtypes_of(op)]
    if _mode() == "sample":
        items = sorted(random.Random(SAMPLE_SEED).sample(items, SAMPLE_SIZE))
    return items


@pytest.fixture(scope="module", autouse=True)
def _device() -> Iterator[None]:
    import lightning_accel.habana_emulator  # noqa: F401  (the SDK's load: the C++ device and torch.hpu)

    yield


def _record(record_property: Any, results: list[CaseResult]) -> None:
    record_property(PROPERTY, counts_of(results))


def _describe(results: list[CaseResult]) -> str:
    return "\n".join(f"  {r.key}: {r.detail}" for r in results)


_ITEMS = _items()


@pytest.mark.parametrize(("name", "dtype"), _ITEMS, ids=[f"{n}-{d}" for n, d in _ITEMS])
def test_operator(name: str, dtype: str, record_property: Any) -> None:
    """Every case of one OpInfo in one dtype conforms, apart from the known failures."""
    known = _known().get((name, dtype), {})
    results = [r for r in run_cases(all_ops()[name], dtype) if r.index not in known.get(r.direction, set())]
    _record(record_property, results)
    failed = [r for r in results if r.status == "fail"]
    assert not failed, (
        f"{len(failed)} case(s) of {name} in {dtype} differ between 'hpu' and the CPU (fix the emulator, or add them "
        f"to {TABLE.name} with the reason):\n{_describe(failed)}"
    )


def _groups() -> list[Any]:
    params = []
    for group in _table():
        group_id = f"{group['op']}-{group['dtype']}-{group['direction']}"
        marks = pytest.mark.xfail(strict=True, raises=KnownFailure, reason=group["reason"])
        params.append(pytest.param(group, id=group_id, marks=marks))
    return params


@pytest.mark.parametrize("group", _groups())
def test_known_failures(group: dict[str, Any], record_property: Any) -> None:
    """Each case of a group of the known-failure table still fails (strict: a case that passes fails the run)."""
    assert group["dtype"] in DTYPES and group["direction"] in ("forward", "backward"), group
    indices = set(group["samples"])
    results = [
        r
        for r in run_cases(all_ops()[group["op"]], group["dtype"], indices)
        if r.direction == group["direction"] and r.index in indices
    ]
    _record(record_property, results)
    ran = {r.index for r in results}
    assert ran == indices, f"the table names samples {sorted(indices - ran)} that do not exist (any more): update it"
    passing = sorted(r.index for r in results if r.status != "fail")
    assert not passing, (
        f"samples {passing} of {group['op']} ({group['dtype']}, {group['direction']}) now conform: remove them from "
        f"{TABLE.name}"
    )
    raise KnownFailure(_describe(results))


def test_loading_the_operator_database_leaves_torchs_backend_flags_settable() -> None:
    # torch's test utilities freeze torch.backends' flags when imported; every later Trainer of the process sets
    # cudnn.benchmark, so a frozen flag would fail it ("not allowed to set torch.backends.cudnn flags").
    import torch

    assert all_ops()
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark = before
