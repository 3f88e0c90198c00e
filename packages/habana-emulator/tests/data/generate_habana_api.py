"""Write habana_<release>_api.json: the modules, names and signatures of ``habana_frameworks.torch``, read with ``ast``.

Usage (a clone of https://github.com/HabanaAI/gaudi-pytorch-bridge; tags v1.19.0 = 5a56187, v1.18.0 = f90046f):

    python generate_habana_api.py /path/to/gaudi-pytorch-bridge [--ref v1.19.0] [--te-ref v1.18.0]

SDK 1.24 (``habana_1_24_api.json``): the bridge's newest public commit, bcc5172 (the 1.24 period: its
``.devops/build_profiles/profiles.json`` names torch 2.9.1, 2.10.0 and 2.11.0), is in the public code index but not in
any clone this project can make (the repository's published history ends at v1.19.0). Its table is generated from a
reconstruction (``docs/emulator.md``, "The SDK tables", says how it is made): a git repository whose one commit holds
v1.19.0's files, overlaid with the files the index holds at bcc5172 reduced to their top-level structure and
signatures (all this generator reads), plus the files added after 1.19 that those import:

    python generate_habana_api.py /path/to/reconstruction --ref bcc5172 --te-repo /path/to/gaudi-pytorch-bridge \
        --out habana_1_24_api.json --source "..."

Nothing is imported: the sources are read at ``--ref`` with ``git show``, under
``python_packages/habana_frameworks/torch/``. A module is public when no part of its dotted name starts with ``_``.
Per module the table lists every name bound at the top level (including names bound inside top-level ``if`` and
``try`` blocks; a name bound only under ``if is_lazy():`` is marked ``"lazy_only"``, one bound only under another
``if`` gets ``"only_if"``: the condition's source), with its kind:

* ``function`` / ``class`` (with ``params``: ``ast.unparse`` of the arguments, ``self`` dropped; a class's public
  methods under ``members``), ``value`` (an assignment);
* ``module`` (a submodule bound by ``from . import x`` or ``import habana_frameworks.torch.x as y``);
* ``imported`` (``from <SDK module> import name``, with ``from``), resolved to the definition where possible;
* ``native`` (bound from a compiled ``_*_C`` module, whose names the source does not list).

Star imports of SDK modules contribute the public names of that module (or its ``__all__``). Imports from outside
the SDK (``os``, ``torch``, ``typing``) are not part of its surface and are left out. ``__all__``, where a module
defines one, is recorded as ``all``. Names beginning with ``_`` are kept with ``"private": true`` (DeepSpeed calls
``utils.experimental._get_device_type``); the emulator test holds the emulator to the public ones.

``hpex.experimental.transformer_engine`` re-exports the non-public ``intel_transformer_engine`` from 1.19 on; its
module surface is recorded from ``--te-ref`` (1.18.0), with that source noted in ``te_source``.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = "python_packages/habana_frameworks/torch"
PACKAGE = "habana_frameworks.torch"
TE = "hpex.experimental.transformer_engine"
# The commits of the published tags (a snapshot of the repository may lack the tags themselves).
TAGS = {"v1.19.0": "5a56187", "v1.18.0": "f90046f"}
# The releases the emulator can play (LIGHTNING_ACCEL_EMULATE_HPU_SDK) and the file each one's table is written to.
OUTPUTS = {"v1.19.0": "habana_1_19_api.json", "bcc5172": "habana_1_24_api.json"}

Entry = dict[str, Any]

# What Intel documents about releases after the newest public bridge (1.19); the Python of 1.20-1.23 is not public,
# so anything not listed here is unknown for those releases, not "unchanged".
CHANGES = [
    {
        "release": "1.19",
        "module": f"{PACKAGE}.{TE}",
        "change": "re-exports the non-public intel_transformer_engine package; its names and module layout after "
        "1.18 are not published",
        "source": "gaudi-pytorch-bridge v1.19.0 python_packages/habana_frameworks/torch/hpex/experimental/"
        "transformer_engine/__init__.py:27-35",
    },
    {
        "release": "1.21",
        "module": f"{PACKAGE}.utils.internal",
        "change": "eager mode is the default: PT_HPU_LAZY_MODE=0 unless set (1.19's is_lazy() defaults to lazy)",
        "source": "Intel Gaudi docs, Runtime Environment Variables (latest): 'Since Habana software >= 1.21.0, "
        "PT_HPU_LAZY_MODE=0 is the default'; PyTorch Gaudi Theory of Operations (latest): eager mode with "
        "torch.compile is the default, lazy mode a legacy fallback",
    },
    {
        "release": "after 1.19",
        "module": f"{PACKAGE}.hpu",
        "change": "setDeterministic and getDeterministic announced for removal ('deprecated and will be removed in "
        "next release'); whether 1.20+ removed them is not published",
        "source": "gaudi-pytorch-bridge v1.19.0 python_packages/habana_frameworks/torch/hpu/__init__.py:173-184",
    },
]


# What the 1.24 table cannot show (bcc5172 paths under python_packages/habana_frameworks/torch/).
CHANGES_AFTER_BCC5172 = [
    {
        "release": "1.24",
        "module": f"{PACKAGE}.version",
        "change": "written when the wheel is built (not in the repository): __version__ and version, which "
        "__init__.py imports inside try/except ImportError",
        "source": "bcc5172 __init__.py, its last statement",
    },
    {
        "release": "1.24",
        "module": PACKAGE,
        "change": "lazy mode (PT_HPU_LAZY_MODE=1) is refused at load on an upstream CPU build of torch (a version "
        "with a '+cpu' local part): AssertionError 'Upstream PyTorch version ... is not supported in Lazy mode.'; "
        "Intel's own torch build (local part 'git...' or 'hpu...') keeps it",
        "source": "bcc5172 __init__.py, the is_torch_fork / is_upstream_cpu checks before the library is loaded",
    },
    {
        "release": "1.24",
        "module": f"{PACKAGE}.*",
        "change": "a file the index does not hold at bcc5172 did not change there; the reconstruction takes it from "
        "v1.19.0, so a module deleted after 1.19 and never changed since would still be listed",
        "source": "the public code index of HabanaAI/gaudi-pytorch-bridge",
    },
]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


class Tree:
    """The Python files of the SDK at one ref, by dotted module name relative to ``habana_frameworks.torch``."""

    def __init__(self, repo: Path, ref: str) -> None:
        self.repo, self.ref = repo, ref
        files = git(repo, "ls-tree", "-r", "--name-only", ref, ROOT).split()
        self.files: dict[str, str] = {}
        for path in files:
            if not path.endswith(".py"):
                continue
            parts = path[len(ROOT) + 1 : -3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.files[".".join(parts)] = path
        self._cache: dict[str, dict[str, Entry]] = {}

    def is_package(self, module: str) -> bool:
        path = self.files.get(module)
        return path is not None and path.endswith("__init__.py")

    def parse(self, module: str) -> ast.Module:
        return ast.parse(git(self.repo, "show", f"{self.ref}:{self.files[module]}"))

    def resolve(self, module: str, node: ast.ImportFrom) -> str | None:
        """The SDK-relative name of the module an import reads from; None when it is outside the SDK."""
        if node.level:
            base = module.split(".") if self.is_package(module) else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join([*filter(None, base), *([node.module] if node.module else [])])
            return target
        name = node.module or ""
        if name == PACKAGE:
            return ""
        if name.startswith(PACKAGE + "."):
            return name[len(PACKAGE) + 1 :]
        return None

    def names(self, module: str) -> dict[str, Entry]:
        if module not in self._cache:
            self._cache[module] = {}  # cycles (hpu <-> hpu.memory) see what is known so far
            self._cache[module] = self._names(module)
        return self._cache[module]

    def _names(self, module: str) -> dict[str, Entry]:
        tree = self.parse(module)
        names: dict[str, Entry] = {}
        declared: list[str] | None = None
        for node, lazy_only, only_if in _top_level(tree.body):
            for name, entry in self._describe(module, node).items():
                if lazy_only:
                    entry = {**entry, "lazy_only": True}
                if only_if is not None:
                    entry = {**entry, "only_if": only_if}
                known = names.get(name)
                if known is not None and only_if is not None and known.get("only_if") not in (None, only_if):
                    entry.pop("only_if")  # bound under two conditions (an if and its else): taken as always bound
                # A binding in every mode replaces a lazy-only one; a conditional one never replaces an unconditional.
                if known is None or (not lazy_only and (only_if is None or known.get("only_if") is not None)):
                    names[name] = entry
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                try:
                    declared = list(ast.literal_eval(node.value))
                except ValueError:
                    declared = None
        names.pop("__all__", None)
        for name, entry in names.items():
            if name.startswith("_"):
                entry["private"] = True
        if declared is not None:
            names["__all__"] = {"kind": "all", "names": declared}
        return dict(sorted(names.items()))

    def _describe(self, module: str, node: ast.stmt) -> dict[str, Entry]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return {node.name: {"kind": "function", "params": params(node)}}
        if isinstance(node, ast.ClassDef):
            return {node.name: describe_class(node)}
        if isinstance(node, ast.Assign):
            return {t.id: {"kind": "value"} for t in node.targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return {node.target.id: {"kind": "value"}}
        if isinstance(node, ast.Import):
            found: dict[str, Entry] = {}
            for alias in node.names:
                if alias.asname and alias.name.startswith(PACKAGE + "."):
                    found[alias.asname] = {"kind": "module", "module": alias.name}
            return found
        if isinstance(node, ast.ImportFrom):
            source = self.resolve(module, node)
            if source is None:
                return {}
            found = {}
            for alias in node.names:
                if alias.name == "*":
                    found.update(self._star(source))
                    continue
                bound = alias.asname or alias.name
                sub = f"{source}.{alias.name}" if source else alias.name
                if sub in self.files:
                    found[bound] = {"kind": "module", "module": f"{PACKAGE}.{sub}"}
                elif _is_native(source) or source not in self.files:
                    found[bound] = {"kind": "native", "from": f"{PACKAGE}.{source}"}
                else:
                    target = self.names(source).get(alias.name)
                    entry: Entry = {"kind": "imported", "from": f"{PACKAGE}.{source}" if source else PACKAGE}
                    if target and target["kind"] in ("function", "class", "value"):
                        entry = {**{k: v for k, v in target.items() if k != "private"}, "from": entry["from"]}
                    found[bound] = entry
            return found
        return {}

    def _star(self, source: str) -> dict[str, Entry]:
        if _is_native(source) or source not in self.files:
            return {f"*{PACKAGE}.{source}": {"kind": "native", "from": f"{PACKAGE}.{source}"}}
        names = self.names(source)
        declared = names.get("__all__")
        keep = declared["names"] if declared else [n for n in names if not n.startswith("_")]
        return {
            name: {**{k: v for k, v in names[name].items() if k != "private"}, "from": f"{PACKAGE}.{source}"}
            for name in keep
            if name in names
        }


def _is_native(module: str) -> bool:
    return module.rsplit(".", 1)[-1].endswith("_C")


def _top_level(body: list[ast.stmt], lazy_only: bool = False, only_if: str | None = None) -> Any:
    """Top-level statements with the condition they are bound under, descending into ``if``/``try`` blocks.

    ``if is_lazy():`` marks lazy-only names; any other ``if`` gives its names ``only_if``, the condition's source (the
    ``else`` branch its negation): the SDK binds them only when it holds, e.g. ``enable_compiled_autograd`` in
    ``dynamo.compile_backend`` only with ``PT_HPU_ENABLE_COMPILED_AUTOGRAD`` set.
    """
    for node in body:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if test == "is_lazy()":
                yield from _top_level(node.body, True, only_if)
                continue
            yield from _top_level(node.body, lazy_only, _both(only_if, test))
            yield from _top_level(node.orelse, lazy_only, _both(only_if, f"not ({test})"))
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body, lazy_only, only_if)
            for handler in node.handlers:
                yield from _top_level(handler.body, lazy_only, only_if)
        else:
            yield node, lazy_only, only_if


def _both(outer: str | None, inner: str) -> str:
    return inner if outer is None else f"({outer}) and ({inner})"


def params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = node.args
    if args.args and args.args[0].arg in ("self", "cls"):
        positional = args.args[1:]
        args = ast.arguments(
            posonlyargs=args.posonlyargs,
            args=positional,
            vararg=args.vararg,
            kwonlyargs=args.kwonlyargs,
            kw_defaults=args.kw_defaults,
            kwarg=args.kwarg,
            defaults=args.defaults[len(args.defaults) - len(positional) :] if positional else [],
        )
    return ast.unparse(args)


def describe_class(node: ast.ClassDef) -> Entry:
    members: dict[str, Entry] = {}
    init = None
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if child.name == "__init__":
                init = child
            if child.name.startswith("_"):
                continue
            decorators = [ast.unparse(d) for d in child.decorator_list]
            kind = "property" if "property" in decorators else "method"
            members[child.name] = {"kind": kind, "params": params(child)}
    entry: Entry = {
        "kind": "class",
        "params": params(init) if init else "",
        "bases": [ast.unparse(b) for b in node.bases],
    }
    if members:
        entry["members"] = dict(sorted(members.items()))
    return entry


def commit_of(repo: Path, ref: str) -> str:
    try:
        return git(repo, "rev-parse", f"{ref}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        return git(repo, "rev-parse", f"{TAGS[ref]}^{{commit}}").strip()


def public_modules(tree: Tree) -> list[str]:
    return sorted(m for m in tree.files if not any(part.startswith("_") for part in m.split(".") if part))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--ref", default="v1.19.0")
    parser.add_argument("--te-ref", default="v1.18.0")
    parser.add_argument("--te-repo", type=Path, help="the clone that holds --te-ref (default: repo)")
    parser.add_argument("--out", help="file name beside this script (default: by --ref, see OUTPUTS)")
    parser.add_argument("--source", help="what the table's source field says (default: the tag and its commit)")
    args = parser.parse_args()
    te_repo = args.te_repo or args.repo
    commit, te_commit = commit_of(args.repo, args.ref), commit_of(te_repo, args.te_ref)
    tree, te_tree = Tree(args.repo, commit), Tree(te_repo, te_commit)
    modules: dict[str, dict[str, Entry]] = {}
    for module in public_modules(tree):
        if module == TE or module.startswith(TE + "."):
            continue
        modules[f"{PACKAGE}.{module}" if module else PACKAGE] = tree.names(module)
    for module in public_modules(te_tree):
        if module == TE or module.startswith(TE + "."):
            modules[f"{PACKAGE}.{module}"] = te_tree.names(module)
    table = {
        "source": args.source
        or f"https://github.com/HabanaAI/gaudi-pytorch-bridge, tag {args.ref} (commit {commit}), {ROOT}/",
        "te_source": (
            f"{PACKAGE}.{TE} and its submodules: tag {args.te_ref} (commit {te_commit}); from {args.ref} the package "
            "re-exports the non-public intel_transformer_engine (transformer_engine/__init__.py), whose source is "
            "not published"
        ),
        "generator": "packages/habana-emulator/tests/data/generate_habana_api.py",
        "changes_after_1_19": CHANGES if args.ref == "v1.19.0" else CHANGES_AFTER_BCC5172,
        "modules": dict(sorted(modules.items())),
    }
    out = Path(__file__).with_name(args.out or OUTPUTS.get(args.ref, f"habana_{args.ref}_api.json"))
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {out} ({len(modules)} modules, {sum(len(v) for v in modules.values())} names)")


if __name__ == "__main__":
    main()
