"""Assemble a git repository that stands for gaudi-pytorch-bridge at a commit only the public code index holds.

The bridge's published history ends at v1.19.0; its newest public commit, bcc5172 (the SDK 1.24 period), is readable
file by file in the public code index (``read_file`` with the commit), and a file is stored at that commit only when
it changed there. ``generate_habana_api.py`` reads top-level structure and signatures only, so the reconstruction
holds, for each Python file:

* the index's text at the commit, reduced to its skeleton (imports, ``if``/``try`` structure, ``def`` and ``class``
  signatures with every method's, assigned names, ``__all__``), written by hand under ``--skeletons``;
* for files added after 1.19 that those import and that did not change at the commit, the skeleton of their newest
  stored version, also under ``--skeletons``;
* every other file from v1.19.0 in a clone of the bridge (unchanged since, or deleted: the index cannot tell).

Usage:

    python reconstruct_bridge.py --clone /path/to/gaudi-pytorch-bridge --skeletons /path/to/skeletons --out /tmp/bcc5172
    python generate_habana_api.py /tmp/bcc5172 --ref bcc5172 --te-repo /path/to/gaudi-pytorch-bridge --source "..."

Neither the skeletons nor the reconstruction are part of this repository (they are the SDK's code, reduced).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

ROOT = "python_packages/habana_frameworks/torch"
BASE = "5a56187"  # v1.19.0


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clone", type=Path, required=True, help="a clone of gaudi-pytorch-bridge with v1.19.0")
    parser.add_argument("--skeletons", type=Path, required=True, help="a folder holding python_packages/...")
    parser.add_argument("--out", type=Path, required=True, help="the repository to write (replaced)")
    parser.add_argument("--tag", default="bcc5172", help="the tag its one commit gets")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    base = [
        p for p in git("-C", str(args.clone), "ls-tree", "-r", "--name-only", BASE, ROOT).split() if p.endswith(".py")
    ]
    for path in base:
        target = args.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        blob = subprocess.run(["git", "-C", str(args.clone), "show", f"{BASE}:{path}"], check=True, capture_output=True)
        target.write_bytes(blob.stdout)
    skeletons = sorted((args.skeletons / ROOT).rglob("*.py"))
    for source in skeletons:
        target = args.out / source.relative_to(args.skeletons)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    git("init", "-q", str(args.out))
    git("-C", str(args.out), "add", "-A")
    identity = ("-c", "user.name=reconstruction", "-c", "user.email=reconstruction@localhost")
    git("-C", str(args.out), *identity, "commit", "-q", "-m", f"{args.tag}, reconstructed")
    git("-C", str(args.out), "tag", args.tag)
    print(f"{args.out}: {len(base)} files of v1.19.0, {len(skeletons)} skeletons over them, tagged {args.tag}")


if __name__ == "__main__":
    main()
