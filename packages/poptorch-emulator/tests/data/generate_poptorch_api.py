"""Write poptorch_3_4_api.json: the public names and signatures of poptorch 3.4, read from its source with ``ast``.

Usage (a clone of https://github.com/graphcore/poptorch):

    python generate_poptorch_api.py /path/to/poptorch [--ref sdk/poptorch/3.4.0]

Nothing is imported: the sources are read at ``--ref`` with ``git show``. The table lists, per namespace, every
public name with its kind and, for functions, methods and classes, the parameters (``ast.unparse`` of the
arguments, ``self`` dropped); values and enumeration members carry their source text. Star imports of the
package's own modules (``from .options import *``) contribute the public names those modules define. Namespaces:
``poptorch`` and ``poptorch.optim`` (module level), every public class with methods (``CLASSES``: ``Options`` and
its sub-option classes, ``PoplarExecutor``, the execution strategies, ``DataLoader``, the optimizers, ...), and
every enumeration of ``enums.py`` with its members.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).with_name("poptorch_3_4_api.json")
# Namespace -> the classes (file under python/, class name) whose public members it has, base classes first.
_OPTIONS_DICT = ("_options_impl.py", "OptionsDict")
_STRATEGY = ("options.py", "_IExecutionStrategy")
_PHASED = ("options.py", "_IPhasedExecution")
_OPTIMIZER = ("optim.py", "Optimizer")
CLASSES = {
    "poptorch.Options": [_OPTIONS_DICT, ("options.py", "Options")],
    "poptorch.Options.Training": [_OPTIONS_DICT, ("options.py", "_TrainingOptions")],
    "poptorch.Options.Precision": [_OPTIONS_DICT, ("options.py", "_PrecisionOptions")],
    "poptorch.Options.Distributed": [_OPTIONS_DICT, ("options.py", "_DistributedOptions")],
    "poptorch.Options.TensorLocations": [_OPTIONS_DICT, ("options.py", "_TensorLocationOptions")],
    "poptorch.Options.Jit": [_OPTIONS_DICT, ("options.py", "_JitOptions")],
    "poptorch.Options._Popart": [("options.py", "_PopartOptions")],
    "poptorch.TensorLocationSettings": [_OPTIONS_DICT, ("options.py", "TensorLocationSettings")],
    "poptorch.PoplarExecutor": [("_poplar_executor.py", "PoplarExecutor")],
    "poptorch.Stage": [("options.py", "Stage")],
    "poptorch.Phase": [("options.py", "Phase")],
    "poptorch.PipelinedExecution": [_STRATEGY, ("options.py", "PipelinedExecution")],
    "poptorch.ShardedExecution": [_STRATEGY, ("options.py", "PipelinedExecution"), ("options.py", "ShardedExecution")],
    "poptorch.ParallelPhasedExecution": [_STRATEGY, _PHASED, ("options.py", "ParallelPhasedExecution")],
    "poptorch.SerialPhasedExecution": [_STRATEGY, _PHASED, ("options.py", "SerialPhasedExecution")],
    "poptorch.Block": [("ops.py", "Block")],
    "poptorch.DataLoader": [("__init__.py", "DataLoader")],
    "poptorch.AsynchronousDataAccessor": [("__init__.py", "AsynchronousDataAccessor")],
    "poptorch.optim.VariableAttributes": [("optim.py", "VariableAttributes")],
    "poptorch.optim.SGD": [_OPTIMIZER, ("optim.py", "SGD")],
    "poptorch.optim.Adam": [_OPTIMIZER, ("optim.py", "Adam")],
    "poptorch.optim.AdamW": [_OPTIMIZER, ("optim.py", "AdamW")],
    "poptorch.optim.RMSprop": [_OPTIMIZER, ("optim.py", "RMSprop")],
    "poptorch.optim.LAMB": [_OPTIMIZER, ("optim.py", "LAMB")],
}
# Modules whose every class is an enumeration: each becomes a namespace "poptorch.<Enum>" of its members.
ENUM_MODULES = ["enums.py"]


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
        decorators = [ast.unparse(d) for d in node.decorator_list]
        is_property = any(d == "property" or d.endswith((".setter", ".deleter")) for d in decorators)
        kind = "property" if is_property else "function"
        return {node.name: {"kind": kind, "params": params(node)}}
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return {node.name: {"kind": "class", "params": params(init) if init else ""}}
    if isinstance(node, ast.Assign):
        return {
            t.id: {"kind": "value", "value": ast.unparse(node.value)} for t in node.targets if isinstance(t, ast.Name)
        }
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


def enum_namespaces(repo: Path, ref: str) -> dict[str, dict[str, dict[str, str]]]:
    spaces = {}
    for name in ENUM_MODULES:
        for node in source(repo, ref, name).body:
            if isinstance(node, ast.ClassDef):
                members = {}
                for child in node.body:
                    if isinstance(child, ast.Assign):
                        for target in child.targets:
                            if isinstance(target, ast.Name):
                                members[target.id] = {"kind": "member", "value": ast.unparse(child.value)}
                spaces[f"poptorch.{node.name}"] = public(members)
    return spaces


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
        "generator": "packages/poptorch-emulator/tests/data/generate_poptorch_api.py",
        "namespaces": {
            "poptorch": module_names(args.repo, args.ref, "__init__.py"),
            "poptorch.optim": module_names(args.repo, args.ref, "optim.py"),
            **{
                space: public({k: v for f, cls in classes for k, v in class_names(args.repo, args.ref, f, cls).items()})
                for space, classes in CLASSES.items()
            },
            **enum_namespaces(args.repo, args.ref),
        },
    }
    OUT.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT} ({sum(len(v) for v in table['namespaces'].values())} names)")


if __name__ == "__main__":
    main()
