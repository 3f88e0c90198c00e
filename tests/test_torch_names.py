"""Every torch name our Gaudi packages use exists in every supported torch (tools/torch_names.py), read statically."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import torch_names  # noqa: E402

GENERATE = "run `python tools/torch_names.py generate`"


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return json.loads((ROOT / "tools" / "data" / "torch_names.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def used() -> dict[str, list[str]]:
    return torch_names.collect(ROOT, torch_names.PACKAGES)


@pytest.fixture(scope="module")
def name(record: dict[str, Any], used: dict[str, list[str]]) -> str:
    """A real name our packages use, present everywhere (torch.distributed.all_reduce while we use it)."""
    usable = [name for name, entry in record["names"].items() if name in used and all(entry["present"].values())]
    assert usable
    return "torch.distributed.all_reduce" if "torch.distributed.all_reduce" in usable else sorted(usable)[0]


# --- the record against our packages as they are now


def test_the_record_holds_exactly_the_names_our_packages_use(
    record: dict[str, Any], used: dict[str, list[str]]
) -> None:
    assert used, "no torch name found in our packages: collect() reads nothing"
    assert torch_names.coverage_errors(record, used) == []


def test_the_record_checks_every_supported_torch(record: dict[str, Any]) -> None:
    assert set(record["versions"]) == set(torch_names.SUPPORTED_TORCH)
    assert torch_names.version_errors(record) == []
    for name, entry in record["names"].items():
        assert set(entry["present"]) == set(torch_names.SUPPORTED_TORCH), name


def test_every_name_exists_in_every_supported_torch_or_is_allowed(
    record: dict[str, Any], used: dict[str, list[str]]
) -> None:
    assert torch_names.presence_errors(record, used) == []
    assert torch_names.check(record, used) == []


def test_every_allowed_name_says_why() -> None:
    assert all(reason.strip() for reason in torch_names.ALLOWED.values())


# --- the check fails, naming the name, the version and where it is used


def test_a_name_missing_from_one_torch_fails_naming_it(
    record: dict[str, Any], used: dict[str, list[str]], name: str
) -> None:
    broken = copy.deepcopy(record)
    broken["names"][name]["present"]["2.9.1"] = False
    where = torch_names._where(used[name])
    assert torch_names.presence_errors(broken, used) == [
        f"{name} (used at {where}) does not exist in torch 2.9.1 (Intel Gaudi software 1.23). Use a name every "
        "supported torch has, or guard it with a version check and list it in ALLOWED with the reason, then run "
        "`python tools/torch_names.py generate`."
    ]
    assert where.startswith("packages/")
    # Listed in ALLOWED with a reason, the same record passes.
    assert torch_names.presence_errors(broken, used, allowed={name: "guarded by a version check"}) == []


def test_an_undecidable_name_fails_until_allowed(record: dict[str, Any], used: dict[str, list[str]], name: str) -> None:
    broken = copy.deepcopy(record)
    broken["names"][name]["present"]["2.13.0"] = None
    (error,) = torch_names.presence_errors(broken, used)
    assert error.startswith(f"{name} (used at packages/") and "cannot be decided statically in torch 2.13.0" in error
    assert "ALLOWED" in error and GENERATE in error


def test_a_stale_allowed_entry_fails(record: dict[str, Any], used: dict[str, list[str]], name: str) -> None:
    errors = torch_names.presence_errors(record, used, allowed={name: "was missing", "torch.nope": "gone"})
    assert errors == [
        f"ALLOWED lists {name}, which every supported torch now has: remove it from ALLOWED.",
        "ALLOWED lists torch.nope, which our packages no longer use: remove it from ALLOWED.",
    ]


def test_a_name_used_but_not_recorded_fails(record: dict[str, Any], name: str) -> None:
    recorded = {used: entry["used_at"] for used, entry in record["names"].items()}
    more = {**recorded, "torch.brand_new": ["packages/habana/src/x.py:3"]}
    fewer = {used: spots for used, spots in recorded.items() if used != name}
    assert torch_names.coverage_errors(record, more) == [
        f"torch.brand_new (used at packages/habana/src/x.py:3) is not in tools/data/torch_names.json: {GENERATE}."
    ]
    assert torch_names.coverage_errors(record, fewer) == [
        f"{name} is in tools/data/torch_names.json but our packages no longer use it: {GENERATE}."
    ]


def test_a_missing_version_fails(record: dict[str, Any]) -> None:
    broken = copy.deepcopy(record)
    del broken["versions"]["2.9.1"]
    (error,) = torch_names.version_errors(broken)
    assert "SUPPORTED_TORCH lists" in error and GENERATE in error


# --- resolve() on tiny sources

SOURCES = {
    "torch/__init__.py": (
        "from torch._C import *\n"
        "from torch.nn import functional\n"
        "from torch.utils import helper as renamed\n"
        "import torch.utils as utils_alias\n"
        "try:\n    import numpy\nexcept ImportError:\n    def guarded(): pass\n"
        "__all__ = ['promised']\n"
        "class Tensor:\n"
        "    dtype: int\n"
        "    def view(self): pass\n"
        "    class Nested:\n        X = 1\n"
        "class Sub(Tensor):\n    pass\n"
        "class Foreign(numpy.ndarray):\n    pass\n"
        "class Plain:\n    pass\n"
        "Alias = Tensor\n"
        "table = {}\n"
    ),
    "torch/_C/__init__.pyi": "def from_c() -> None: ...\ndef _private() -> None: ...\n",
    "torch/nn/__init__.py": "from .modules import *\n",
    "torch/nn/modules/__init__.py": "from .linear import Linear\n__all__ = ['Linear']\n",
    "torch/nn/modules/linear.py": "class Linear:\n    def forward(self): pass\nclass Hidden:\n    pass\n",
    "torch/nn/functional.py": "def relu(x): pass\n",
    "torch/utils/__init__.py": "def helper(): pass\n",
    "torch/lazy.py": "def __getattr__(name): ...\n",
    "torch/cext.py": "from torch._missing_c import *\n",
}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch.nn.functional.relu", True),  # a function
        ("torch.nn.functional.gelu", False),  # a missing name
        ("torch.Tensor.dtype", True),  # an annotated class attribute
        ("torch.Tensor.view", True),  # a method
        ("torch.Tensor.Nested.X", True),  # a nested class's attribute
        ("torch.Tensor.nope", False),  # a class without bases: provably absent
        ("torch.Sub.view", True),  # inherited from a base class in the sources
        ("torch.Sub.nope", False),
        ("torch.Foreign.nope", None),  # a base outside the sources may have it
        ("torch.Plain.nope", False),
        ("torch.Alias.view", True),  # an assignment aliasing a class
        ("torch.table.get", True),  # a dict built there has dict's methods
        ("torch.table.nope", False),
        ("torch.nn.Linear.forward", True),  # a star import, then a re-export, then the class body
        ("torch.nn.Hidden", False),  # not in the star-imported module's __all__
        ("torch.functional.relu", True),  # `from torch.nn import functional` re-exports a module
        ("torch.renamed", True),  # `from ... import helper as renamed`
        ("torch.utils_alias.helper", True),  # `import torch.utils as utils_alias`
        ("torch.guarded", True),  # bound in a try block
        ("torch.promised", True),  # listed in __all__
        ("torch.from_c", True),  # a star import of a C module with a stub
        ("torch._private", False),  # a star import does not bring private names
        ("torch.lazy.anything", None),  # the module's __getattr__ may provide it
        ("torch.cext.anything", None),  # a star import of a C module without a stub
        ("torch.nn.functional.relu.__name__", None),  # an attribute of a function
        ("torch.nope.deeper", False),
    ],
)
def test_resolve(name: str, expected: bool | None) -> None:
    assert torch_names.resolve(SOURCES, name) is expected


# --- collect() on a small source


def test_collect_reads_imports_aliases_and_attribute_chains() -> None:
    source = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "import torch.nn.functional as F\n"
        "from torch.optim import Optimizer as Opt\n"
        "from torch import nn\n"
        "x = torch.zeros(3).view(1, 3)\n"  # `.view` is on a value: only torch.zeros
        "if torch.cuda.is_available():\n"
        "    dist.all_reduce(x)\n"
        "y = F.softmax(x, dim=0)\n"
        "class M(nn.Module):\n"
        "    def step(self, o: Opt) -> torch.Tensor:\n"
        "        return torch._dynamo.utils.counters['x'].total\n"
        "s = 'torch.not_a_name'  # torch.nor_this\n"
        "tensor = x\n"
        "tensor.reshape(3)\n"
        "torch.ops[0].nope\n"
    )
    found = torch_names.collect_source(source, "pkg/m.py")
    assert found == {
        "torch.distributed": ["pkg/m.py:2"],
        "torch.nn.functional": ["pkg/m.py:3"],
        "torch.optim.Optimizer": ["pkg/m.py:4", "pkg/m.py:11"],
        "torch.nn": ["pkg/m.py:5"],
        "torch.zeros": ["pkg/m.py:6"],
        "torch.cuda.is_available": ["pkg/m.py:7"],
        "torch.distributed.all_reduce": ["pkg/m.py:8"],
        "torch.nn.functional.softmax": ["pkg/m.py:9"],
        "torch.nn.Module": ["pkg/m.py:10"],
        "torch.Tensor": ["pkg/m.py:11"],
        "torch._dynamo.utils.counters": ["pkg/m.py:12"],
        "torch.ops": ["pkg/m.py:16"],
    }


def test_collect_reports_paths_relative_to_the_root(tmp_path: Path) -> None:
    package = tmp_path / "packages" / "p" / "src"
    package.mkdir(parents=True)
    (package / "b.py").write_text("import torch\n\n\ntorch.b\n")
    (package / "a.py").write_text("import torch\ntorch.a\ntorch.b\n")
    assert torch_names.collect(tmp_path, ["packages/p/src"]) == {
        "torch.a": ["packages/p/src/a.py:2"],
        "torch.b": ["packages/p/src/a.py:3", "packages/p/src/b.py:4"],
    }


def test_the_record_is_written_sorted_and_atomically(tmp_path: Path) -> None:
    target = tmp_path / "data" / "names.json"
    torch_names.write({"b": 1, "a": {"d": None, "c": True}}, target)
    assert target.read_text() == '{\n "a": {\n  "c": true,\n  "d": null\n },\n "b": 1\n}\n'
    assert [path.name for path in target.parent.iterdir()] == ["names.json"]  # no temporary file left
