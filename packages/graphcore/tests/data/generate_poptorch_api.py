"""Write poptorch_3_4_api.json: the public names and signatures of poptorch 3.4, read from its source with ``ast``.

Usage (a clone of https://github.com/graphcore/poptorch):

    python generate_poptorch_api.py /path/to/poptorch [--ref sdk/poptorch/3.4.0]

Nothing is imported: the sources are read at ``--ref`` with ``git show``. The table lists, per namespace, every
public name with its kind and, for functions, methods and classes, the parameters (``ast.unparse`` of the
arguments, ``self`` dropped). Star imports of the package's own modules (``from .options import *``) contribute the
public names those modules define.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).with_name("poptorch_3_4_api.json")
# Namespace -> the classes (file under python/, class name) whose public members it has, base classes first.
CLASSES = {
    "poptorch.Options": [("_options_impl.py", "OptionsDict"), ("options.py", "Options")],
    "poptorch.Options.Training": [("_options_impl.py", "OptionsDict"), ("options.py", "_TrainingOptions")],
    "poptorch.PoplarExecutor": [("_poplar_executor.py", "PoplarExecutor")],
}


def source(repo: Path, ref: str, name: str) -> ast.Module:
    text = subprocess.run(
        ["git", "show", f"{ref}:python/{name}"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    return ast.parse(text)


def params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = node.args
    if args.args and args.args[0].arg in ("self", "cls"):
        args = ast.arguments(
            posonlyargs=args.posonlyargs,
            args=args.args[1:],
            vararg=args.vararg,
            kwonlyargs=args.kwonlyargs,
            kw_defaults=args.kw_defaults,
            kwarg=args.kwarg,
            defaults=args.defaults[-len(args.args) + 1 :] if len(args.defaults) >= len(args.args) else args.defaults,
        )
    return ast.unparse(args)


def describe(node: ast.stmt) -> dict[str, dict[str, str]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        kind = "property" if any(ast.unparse(d) == "property" for d in node.decorator_list) else "function"
        return {node.name: {"kind": kind, "params": params(node)}}
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return {node.name: {"kind": "class", "params": params(init) if init else ""}}
    if isinstance(node, ast.Assign):
        return {t.id: {"kind": "value"} for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id: {"kind": "value"}}
    return {}


def public(entries: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {name: entry for name, entry in sorted(entries.items()) if not name.startswith("_")}


def module_names(repo: Path, ref: str, name: str) -> dict[str, dict[str, str]]:
    tree = source(repo, ref, name)
    names: dict[str, dict[str, str]] = {}
    for node in tree.body:
        names.update(describe(node))
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    names.update(module_names(repo, ref, f"{node.module}.py"))
                else:
                    names[alias.asname or alias.name] = {"kind": "imported", "from": node.module}
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            for alias in node.names:
                names[alias.asname or alias.name] = {"kind": "module"}
        if isinstance(node, ast.ImportFrom) and node.module == "poptorch.poptorch_core":
            for alias in node.names:
                names[alias.asname or alias.name] = {"kind": "native"}
    return public(names)


def class_names(repo: Path, ref: str, name: str, cls: str) -> dict[str, dict[str, str]]:
    tree = source(repo, ref, name)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    names: dict[str, dict[str, str]] = {}
    for child in node.body:
        names.update(describe(child))
    return public(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--ref", default="sdk/poptorch/3.4.0")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", f"{args.ref}^{{commit}}"], cwd=args.repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    table = {
        "source": f"https://github.com/graphcore/poptorch, tag {args.ref} (commit {commit}), python/",
        "generator": "packages/graphcore/tests/data/generate_poptorch_api.py",
        "namespaces": {
            "poptorch": module_names(args.repo, args.ref, "__init__.py"),
            "poptorch.optim": module_names(args.repo, args.ref, "optim.py"),
            **{
                space: public({k: v for f, cls in classes for k, v in class_names(args.repo, args.ref, f, cls).items()})
                for space, classes in CLASSES.items()
            },
        },
    }
    OUT.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT} ({sum(len(v) for v in table['namespaces'].values())} names)")


if __name__ == "__main__":
    main()
