"""Every Python code block of the documentation runs, on the emulators, so that the docs cannot rot.

The blocks of one page run in order in one fresh interpreter (later blocks may use what earlier ones defined, as a
reader working down the page would), with ``LIGHTNING_ACCEL_EMULATE=hpu,ipu`` and a temporary working directory.
A failing block fails its page's test, naming the page, the block number and its first line in the file.

Markers, written as comments inside a block:

* ``# docs: no-run (reason)``: the block is shown but not run; the reason is required (e.g. a launch command that
  needs several machines).
* ``# docs: env NAME=VALUE``: set for the page's interpreter (e.g. a larger emulated IPU system).

Console output shown in the docs is checked too: a ``console`` block preceded by
``<!-- docs: output-of [VAR=value ...] lightning-accel ... -->`` must match what the command prints now (every shown
line is a line of the real output; ``...`` lines stand for omitted ones). With ``output-of-keys`` only the
``key:`` part of each ``key: value`` line must match (for versions and platforms that differ between machines),
except the versions of our own distributions, which must match whole; a line without a key matches on its first word.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\n]*)$")
_PYTHON_INFO = re.compile(r"^(python|py|python3|\{code-block\}\s+python|\{code\}\s+python)\b")
_NO_RUN = re.compile(r"#\s*docs:\s*no-run\b(?P<reason>.*)")
_ENV = re.compile(r"#\s*docs:\s*env\s+(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>\S+)")
_OUTPUT_OF = re.compile(r"<!--\s*docs:\s*output-of(?P<keys>-keys)?\s+(?P<command>.+?)\s*-->")
_RST_BLOCK = re.compile(r"^(?P<indent>\s*)\.\.\s+(code-block|code|sourcecode)::\s*python\s*$")


@dataclass
class Block:
    """One Python code block of a page."""

    page: str
    number: int
    line: int
    source: str

    @property
    def label(self) -> str:
        return f"docs/{self.page}, block {self.number} (line {self.line})"


@dataclass
class Page:
    """A documentation page and its Python blocks."""

    path: Path
    root: Path = DOCS
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.relative_to(self.root).as_posix()


def _markdown_blocks(page: str, text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index].strip())
        if match is None:
            index += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if _PYTHON_INFO.match(info):
            body = [line for line in lines[start:end] if not line.startswith(":")]  # MyST directive options
            blocks.append(Block(page, len(blocks) + 1, start, "\n".join(body) + "\n"))
        index = end + 1
    return blocks


def _rst_blocks(page: str, text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = _RST_BLOCK.match(line)
        if match is None:
            continue
        body: list[str] = []
        for following in lines[index + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= len(match["indent"]):
                break
            body.append(following)
        while body and (not body[0].strip() or body[0].strip().startswith(":")):  # directive options
            body.pop(0)
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        source = "\n".join(b[indent:] for b in body).strip("\n") + "\n"
        blocks.append(Block(page, len(blocks) + 1, index + 2, source))
    return blocks


def collect_pages(root: Path = DOCS) -> list[Page]:
    """Every ``.md`` and ``.rst`` page under ``root`` (build output excluded), with its Python blocks."""
    pages = []
    for path in sorted([*root.rglob("*.md"), *root.rglob("*.rst")]):
        if "_build" in path.relative_to(root).parts:
            continue
        page = Page(path, root)
        text = path.read_text(encoding="utf-8")
        page.blocks = (_rst_blocks if path.suffix == ".rst" else _markdown_blocks)(page.name, text)
        pages.append(page)
    return pages


# Executes the blocks of one page in order in a shared namespace; the compiled file name is the block's label, so a
# traceback points at the page, the block and the line inside it.
_DRIVER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
for block in blocks:
    print("=== docs snippet: " + block["label"], flush=True)
    print("=== docs snippet: " + block["label"], file=sys.stderr, flush=True)
    try:
        exec(compile(block["source"], block["label"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print("DOCS SNIPPET FAILED: " + block["label"], file=sys.stderr, flush=True)
        sys.exit(1)
"""

PAGES = [page for page in collect_pages() if page.blocks]


@dataclass
class ShownOutput:
    """A console block that shows a command's output, and the command that produces it."""

    page: str
    line: int
    command: str
    keys_only: bool
    shown: list[str]


def collect_shown_outputs(root: Path = DOCS) -> list[ShownOutput]:
    """Every console block under ``root`` marked with ``<!-- docs: output-of ... -->``."""
    found = []
    for path in sorted(root.rglob("*.md")):
        if "_build" in path.relative_to(root).parts:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            marker = _OUTPUT_OF.search(line)
            if marker is None:
                continue
            start = index + 1
            assert lines[start].startswith("```"), f"{path}:{index + 1}: the output-of marker must precede a block"
            end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
            shown = [s for s in lines[start + 1 : end] if not s.startswith("$ ")]
            name = path.relative_to(root).as_posix()
            found.append(ShownOutput(name, start + 1, marker["command"], bool(marker["keys"]), shown))
    return found


SHOWN = collect_shown_outputs()


def test_the_docs_have_python_blocks_and_every_opt_out_says_why() -> None:
    blocks = [block for page in PAGES for block in page.blocks]
    assert len(blocks) >= 30, f"only {len(blocks)} Python blocks found under {DOCS}"
    for block in blocks:
        for match in _NO_RUN.finditer(block.source):
            assert re.search(r"\(\s*\w.+\)", match["reason"]), f"{block.label}: '# docs: no-run' needs a (reason)"


def test_markdown_extraction_names_pages_blocks_and_lines(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.md").write_text(
        "# Title\n\n```bash\necho no\n```\n\n```python\nx = 1\n```\n\n"
        "````{code-block} python\n:caption: c\ny = 2\n````\n",
        encoding="utf-8",
    )
    (tmp_path / "other.rst").write_text(
        "Title\n=====\n\n.. code-block:: python\n\n    z = 3\n\nText\n", encoding="utf-8"
    )
    pages = {page.name: page for page in collect_pages(tmp_path)}
    page_blocks = [(b.number, b.line, b.source) for b in pages["sub/page.md"].blocks]
    assert page_blocks == [(1, 7, "x = 1\n"), (2, 11, "y = 2\n")]
    assert [(b.line, b.source) for b in pages["other.rst"].blocks] == [(5, "z = 3\n")]


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_page_snippets_run(page: Page, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(LIGHTNING_ACCEL_EMULATE="hpu,ipu", PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    runnable = []
    for block in page.blocks:
        env.update({m["name"]: m["value"] for m in _ENV.finditer(block.source)})
        if _NO_RUN.search(block.source):
            continue
        runnable.append({"label": block.label, "source": block.source})
    if not runnable:
        pytest.skip("no runnable blocks")
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(runnable), encoding="utf-8")
    driver = tmp_path / "run_docs_blocks.py"
    driver.write_text(_DRIVER, encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(driver), str(blocks_file)],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=600,
    )
    failed = re.findall(r"DOCS SNIPPET FAILED: (.*)", done.stderr)
    assert done.returncode == 0, (
        f"{failed[0] if failed else f'docs/{page.name}'} failed (exit {done.returncode}):\n{done.stderr[-6000:]}"
    )


def _command_output(command: str) -> list[str]:
    words = command.split()
    assignments = dict(word.split("=", 1) for word in words if "=" in word and word.split("=")[0].isupper())
    argv = [word for word in words if word.split("=")[0] not in assignments]
    assert argv[0] == "lightning-accel", f"only lightning-accel commands are checked, not {command!r}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_ACCEL_")}
    env.update(assignments)
    done = subprocess.run(
        [sys.executable, "-m", "lightning_accel.core.cli", *argv[1:]], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _key(line: str) -> str:
    """What a shown line of ``output-of-keys`` must still match: the key, not the machine's value.

    The versions of our own distributions are guaranteed by the checkout, so those lines must match whole; a line
    without a ``key:`` (``python 3.11.7 on <platform>``) is reduced to its first word, since the rest names the
    machine (kernel build, libc) the docs were written on.
    """
    stripped = line.strip()
    if stripped.startswith("lightning-accel"):
        return line
    if ":" in line:
        return line.split(":", 1)[0]
    return stripped.split()[0] if stripped else line


@pytest.mark.parametrize("shown", SHOWN, ids=[f"{s.page}:{s.line}" for s in SHOWN])
def test_shown_command_output_matches_the_command(shown: ShownOutput) -> None:
    real = _command_output(shown.command)
    compare = _key if shown.keys_only else (lambda line: line)
    real_lines = {compare(line) for line in real}
    stale = [line for line in shown.shown if line.strip() != "..." and compare(line) not in real_lines]
    assert not stale, (
        f"docs/{shown.page}, line {shown.line}: these lines are no longer printed by {shown.command!r}:\n"
        + "\n".join(stale)
        + "\n\nits output now:\n"
        + "\n".join(real)
    )


def test_the_troubleshooting_page_shows_list_and_env_output() -> None:
    commands = {s.command.split("lightning-accel", 1)[1].split()[0] for s in SHOWN if s.page == "troubleshooting.md"}
    assert commands == {"list", "env"}
