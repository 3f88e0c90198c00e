"""Regenerate the optimum-habana field tables of docs/migration.md from the importer's own table.

Usage: python tools/optimum_table.py [--check]   (--check exits 1 when the docs differ)
"""

from __future__ import annotations

import sys
from pathlib import Path

from lightning_accel.habana.optimum._table import DOCS_END, DOCS_START, docs_block

DOCS = Path(__file__).resolve().parents[1] / "docs" / "migration.md"


def main() -> int:
    """Rewrite (or with --check, compare) the generated block; the exit status."""
    text = DOCS.read_text(encoding="utf-8")
    if DOCS_START not in text or DOCS_END not in text:
        print(f"{DOCS}: the markers {DOCS_START!r} and {DOCS_END!r} are missing", file=sys.stderr)
        return 1
    before, rest = text.split(DOCS_START, 1)
    after = rest.split(DOCS_END, 1)[1]
    updated = before + docs_block() + after
    if "--check" in sys.argv[1:]:
        if updated != text:
            print(f"{DOCS} is out of date: run python tools/optimum_table.py", file=sys.stderr)
            return 1
        return 0
    DOCS.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
