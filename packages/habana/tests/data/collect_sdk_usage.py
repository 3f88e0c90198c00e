"""Write sdk_usage.json: every ``habana_frameworks.torch`` name a piece of code uses, with where it uses it.

Usage (each source a label, a folder or a git checkout with ``@ref``, and the paths to scan inside it):

    python collect_sdk_usage.py \\
        ours=../../../..:packages,examples,docs \\
        deepspeed-0.19.8=<site-packages>:deepspeed/accelerator/hpu_accelerator.py,deepspeed/ops/op_builder/hpu \\
        habanaai-deepspeed-1.21.0=<HabanaAI/DeepSpeed>@ad4a2d0f:accelerator/hpu_accelerator.py,op_builder/hpu \\
        optimum-habana=<clone of huggingface/optimum-habana>@1d8504c:optimum \\
        lightning-habana-1.7.0=<clone of Lightning-AI/lightning-Habana>@1.7.0:src

Python files are read with ``ast``: ``import habana_frameworks.torch.x as y`` and ``from habana_frameworks.torch.x
import a`` record ``x`` and ``x.a``; ``y.name`` (an alias bound that way, or ``self.hpu``, which DeepSpeed's HPU
accelerator binds to ``habana_frameworks.torch.hpu``, or ``torch.hpu``, which the SDK registers as its ``hpu``) records
``x.name``. Markdown files: dotted ``habana_frameworks.torch...`` names. The emulator's own sources and the tests'
stand-in SDK are not scanned (they define names, they do not use them).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path

OUT = Path(__file__).with_name("sdk_usage.json")
SDK = "habana_frameworks.torch"
DOTTED = re.compile(r"\bhabana_frameworks\.torch(?:\.[A-Za-z_]\w*)+")
SKIP = ("_emulator", "standin_sdk", "collect_sdk_usage.py", "generate_habana_api.py", "_build")
# Attribute chains that are SDK modules in the scanned code: DeepSpeed's accelerator keeps the hpu module as
# `self.hpu`; the SDK registers its hpu module as `torch.hpu`; our seam hands the modules out by these names.
SEAM = {"htcore": "core", "hpu": "hpu", "hccl": "distributed.hccl", "ht": ""}
SEAM_CALLS = {
    "hpu_module()": "hpu",
    "core_module()": "core",
    "hccl_module()": "distributed.hccl",
    "ht_module()": "",
    "transformer_engine_module()": "hpex.experimental.transformer_engine",
    "compile_backend_module()": "dynamo.compile_backend",
    "compiled_autograd_module()": "dynamo.compile_backend.experimental",
}
KNOWN_ALIASES = {
    "self.hpu": f"{SDK}.hpu",
    "torch.hpu": f"{SDK}.hpu",
    **{f"sdk.{name}": f"{SDK}.{mod}".rstrip(".") for name, mod in {**SEAM, **SEAM_CALLS}.items()},
    **{name: f"{SDK}.{mod}".rstrip(".") for name, mod in SEAM_CALLS.items()},
}
SEAM_MODULE = "lightning_accel.habana.sdk"


def _files(root: Path, ref: str | None, paths: list[str]) -> dict[str, str]:
    """Relative path -> text of every .py/.md file under ``paths`` (at ``ref`` for a git checkout)."""
    found: dict[str, str] = {}
    if ref:
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", ref, "--", *paths],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        for name in listing:
            if name.endswith((".py", ".md")) and not any(s in name for s in SKIP):
                found[name] = subprocess.run(
                    ["git", "show", f"{ref}:{name}"], cwd=root, check=True, capture_output=True, text=True
                ).stdout
        return found
    for path in paths:
        base = root / path
        for file in [base] if base.is_file() else sorted(base.rglob("*")):
            if file.suffix in (".py", ".md") and not any(s in str(file) for s in SKIP):
                found[str(file.relative_to(root))] = file.read_text(encoding="utf-8", errors="replace")
    return found


def _chain(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        inner = _chain(node.func)
        if inner and inner.rpartition(".")[2] + "()" in SEAM_CALLS:
            parts.append(inner + "()")
            return ".".join(reversed(parts))
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _python_names(text: str) -> list[tuple[str, int]]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    aliases = dict(KNOWN_ALIASES)
    used: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(SDK):
                    used.append((alias.name, node.lineno))
                    if alias.asname:
                        aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module == SEAM_MODULE:
            for alias in node.names:
                if alias.name in SEAM:
                    aliases[alias.asname or alias.name] = f"{SDK}.{SEAM[alias.name]}".rstrip(".")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(SDK) and not node.level:
            used.append((node.module, node.lineno))  # type: ignore[arg-type]
            for alias in node.names:
                if alias.name != "*":
                    used.append((f"{node.module}.{alias.name}", node.lineno))
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if not chain:
                continue
            if chain.startswith(SDK + "."):
                used.append((chain, node.lineno))
                continue
            parts = chain.split(".")
            for end in range(len(parts) - 1, 0, -1):  # the longest head that is an SDK module
                head, rest = ".".join(parts[:end]), ".".join(parts[end:])
                module = aliases.get(head) or KNOWN_ALIASES.get(parts[end - 1] if parts[end - 1] in SEAM_CALLS else "")
                if module:
                    used.append((f"{module}.{rest}", node.lineno))
                    break
    return used


def collect(root: Path, ref: str | None, paths: list[str]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for rel, text in _files(root, ref, paths).items():
        if rel.endswith(".py"):
            found = _python_names(text)
        else:
            found = [(m.group(0), text.count("\n", 0, m.start()) + 1) for m in DOTTED.finditer(text)]
        for name, line in found:
            names.setdefault(name.rstrip("."), []).append(f"{rel}:{line}")
    return {name: sorted(set(where))[:5] for name, where in sorted(names.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="label=root[@ref]:path,path")
    args = parser.parse_args()
    table: dict[str, object] = {"generator": "packages/habana/tests/data/collect_sdk_usage.py", "sources": {}}
    for spec in args.sources:
        label, _, rest = spec.partition("=")
        location, _, paths = rest.rpartition(":")
        root, _, ref = location.partition("@")
        origin = root if not ref else f"{root} at {ref}"
        table["sources"][label] = {  # type: ignore[index]
            "origin": origin,
            "paths": paths.split(","),
            "names": collect(Path(root), ref or None, paths.split(",")),
        }
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
