"""Write poptorch_3_4_ops.json: which ATen operators poptorch 3.4 lowers, and the texts it refuses the others with.

Usage (a clone of https://github.com/graphcore/poptorch):

    python generate_poptorch_ops.py /path/to/poptorch [--ref sdk/poptorch/3.4.0]

Nothing is built or imported: the C++ and reStructuredText sources are read at ``--ref`` with ``git show`` and
searched with regular expressions. The table holds:

- ``lowered``: every ``aten::`` symbol with a canonicalisation handler (``registerHandler(c10::aten::<op>, ...)``
  under ``poptorch/source/popart_canonicalization``), with the file that registers it. After tracing, poptorch
  rewrites each such node into PopART operations; any ``aten::`` node left over fails the compile
  (``poptorch/source/ErrorOnUnsupportedAten.cpp``).
- ``removed_by_passes``: ``aten::`` symbols other passes remove before that check (``AliasProcessing.cpp``), and the
  ``aten::empty`` node the dispatcher creates for new tensors (``JitDispatch.cpp``), which is consumed by the fill
  or copy after it.
- ``only_inplace`` and ``inplace_to_outplace``: how the in-place pass renames ``aten::<op>_`` nodes
  (``InplaceOps.cpp``, ``InplaceOpsPyTorch.hpp_nolint``; any other trailing ``_`` is dropped).
- ``intercepted``: the composite operators the dispatcher takes before torch decomposes them
  (``dispatch_tracer/RegisterOptionalAtenOps.cpp.inc``), as ``name.overload``.
- ``documented_losses``: the loss modules listed in ``docs/user_guide/supported_ops.rst``.
- ``messages``: poptorch's error texts, joined from their C++/Python string literals: ``unsupported_ops`` (with
  ``{ops}`` where poptorch inserts the list), ``nonzero``, ``bincount_minlength`` and ``one_hot_num_classes`` (meta
  kernels, ``RegisterMetaOps.cpp.inc``), ``no_meta_kernel`` (``TypeInferenceHandler.cpp``, with ``{op}``),
  ``input_requires_grad`` (``python/_poplar_executor.py``, with ``{index}`` and
  ``{tensor}``), ``buffer_subclass`` (with ``{type}``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

OUT = Path(__file__).parents[2] / "src" / "lightning_accel" / "poptorch_emulator" / "poptorch_3_4_ops.json"
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def show(repo: Path, ref: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=repo, check=True, capture_output=True, text=True).stdout


def files(repo: Path, ref: str, folder: str) -> list[str]:
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, folder], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    return [line for line in listing.splitlines() if line.endswith(".cpp")]


def literals(text: str) -> str:
    """The C++ string literals of ``text`` concatenated, escapes resolved."""
    return "".join(bytes(part, "utf-8").decode("unicode_escape") for part in _LITERAL.findall(text))


def call_after(text: str, marker: str, opening: str) -> str:
    """The text of the first ``opening(...)`` call after ``marker``, up to its closing parenthesis."""
    start = text.index(opening, text.index(marker))
    depth = 0
    for index in range(start + len(opening) - 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return text[start : index + 1]
    raise ValueError(f"unbalanced call {opening!r} after {marker!r}")


def lowered(repo: Path, ref: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in files(repo, ref, "poptorch/source/popart_canonicalization"):
        for name in re.findall(r"registerHandler\(\s*c10::aten::(\w+)\s*,", show(repo, ref, path)):
            found.setdefault(name, path.rsplit("/", 1)[-1])
    return dict(sorted(found.items()))


def intercepted(repo: Path, ref: str) -> list[str]:
    text = show(repo, ref, "poptorch/source/dispatch_tracer/RegisterOptionalAtenOps.cpp.inc")
    block = text[text.index("TORCH_LIBRARY_IMPL(aten, IPU") :]
    block = block[: block.index("\n}")]
    return sorted(set(re.findall(r'm\.impl\("([\w.]+)"', block)))


def inplace(repo: Path, ref: str) -> tuple[list[str], dict[str, str]]:
    ops = show(repo, ref, "poptorch/source/InplaceOps.cpp")
    only = ops[ops.index("only_inplace = {") : ops.index("};", ops.index("only_inplace = {"))]
    header = show(repo, ref, "poptorch/source/include/poptorch/InplaceOpsPyTorch.hpp_nolint")
    table = header[header.index("inPlaceToOutOfPlace = {") : header.index("};", header.index("inPlaceToOutOfPlace"))]
    pairs = dict(re.findall(r"\{aten::(\w+),\s*aten::(\w+)\}", table))
    return sorted(re.findall(r"aten::(\w+)", only)), pairs


def removed_by_passes(repo: Path, ref: str) -> dict[str, str]:
    alias = show(repo, ref, "poptorch/source/AliasProcessing.cpp")
    dispatch = show(repo, ref, "poptorch/source/dispatch_tracer/dispatchers/JitDispatch.cpp")
    removed = {}
    for name in re.findall(r"kind\(\) != c10::aten::(\w+)", alias):
        removed[name] = "AliasProcessing.cpp"
    if "c10::aten::empty," in dispatch:
        removed["empty"] = "JitDispatch.cpp"
    return removed


def documented_losses(repo: Path, ref: str) -> list[str]:
    text = show(repo, ref, "docs/user_guide/supported_ops.rst")
    section = text[text.index("Loss functions\n") :]
    section = section[: section.index("Vision Layers")]
    return re.findall(r"\* ``torch\.nn\.(\w+)``", section)


def messages(repo: Path, ref: str) -> dict[str, str]:
    unsupported_src = show(repo, ref, "poptorch/source/ErrorOnUnsupportedAten.cpp")
    unsupported_call = call_after(unsupported_src, "Terminate compilation", "ERROR(")
    head, tail = unsupported_call.split("<< ss.str()")
    meta = show(repo, ref, "poptorch/source/dispatch_tracer/RegisterMetaOps.cpp.inc")
    inference = show(repo, ref, "poptorch/source/dispatch_tracer/TypeInferenceHandler.cpp")
    inference_call = call_after(inference, "::inferOutputTypes(", "ERROR_ON_MSG(")
    before, after = inference_call.split("<< schema_key")
    executor = show(repo, ref, "python/_poplar_executor.py")
    grad_call = call_after(executor, "if t.requires_grad:", "createPoptorchError(")
    buffer_call = call_after(executor, "def _install_state_hooks", "createPoptorchError(")
    return {
        "unsupported_ops": literals(head) + "{ops}" + literals(tail),
        "nonzero": literals(call_after(meta, "at::Tensor nonzero(", "ERROR(")),
        "bincount_minlength": literals(call_after(meta, "at::Tensor bincount(", "ERROR_ON_MSG(")),
        "one_hot_num_classes": literals(call_after(meta, "at::Tensor oneHot(", "ERROR_ON_MSG(")),
        "no_meta_kernel": literals(before) + "{op}" + literals(after),
        "input_requires_grad": literals(grad_call).replace("{idx}", "{index}").replace("{t}", "{tensor}"),
        "buffer_subclass": literals(buffer_call).replace("{type(b)}", "{type}"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of graphcore/poptorch")
    parser.add_argument("--ref", default="sdk/poptorch/3.4.0")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", f"{args.ref}^{{commit}}"], cwd=args.repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    only_inplace, inplace_to_outplace = inplace(args.repo, args.ref)
    table = {
        "source": f"https://github.com/graphcore/poptorch, tag {args.ref} (commit {commit})",
        "generator": "packages/poptorch-emulator/tests/data/generate_poptorch_ops.py",
        "lowered": lowered(args.repo, args.ref),
        "removed_by_passes": removed_by_passes(args.repo, args.ref),
        "only_inplace": only_inplace,
        "inplace_to_outplace": inplace_to_outplace,
        "intercepted": intercepted(args.repo, args.ref),
        "documented_losses": documented_losses(args.repo, args.ref),
        "messages": messages(args.repo, args.ref),
    }
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {OUT}: {len(table['lowered'])} lowered operators")


if __name__ == "__main__":
    main()
