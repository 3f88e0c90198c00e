"""Write the emulator's table of the operators Gaudi's bridge has HPU kernels for (``hpu_kernels_1_19.txt``).

Usage (a clone of https://github.com/HabanaAI/gaudi-pytorch-bridge; tag v1.19.0 = 5a56187):

    python generate_hpu_kernels.py /path/to/gaudi-pytorch-bridge [--ref v1.19.0]

The source is the bridge's own list, ``scripts/ops_list/ops.hpu``: its ``generate1.sh`` writes it with
``ops_list.py``, which loads the real SDK and prints torch's registrations for the ``HPU`` and ``AutogradHPU``
dispatch keys (``torch._C._dispatch_print_registrations_for_dispatch_key``). An operator in it has a kernel of the
SDK's own; an operator outside it that reaches the HPU key runs through the SDK's boxed CPU fallback
(``hpu_ops/cpu_fallback.cpp``), which counts it in ``metric_global("cpu_fallback")``. The file at the v1.19.0 tag
was generated, as ``scripts/ops_list/torch.__version__`` there says, with SDK 1.16.0 on torch 2.2: the newest list
the bridge publishes. Names are kept as written (``aten::add.Tensor``), sorted, without repeats.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

OUT = Path(__file__).parents[2] / "src" / "lightning_accel" / "habana_emulator" / "hpu_kernels_1_19.txt"
SOURCE = "scripts/ops_list/ops.hpu"
VERSIONS = "scripts/ops_list/torch.__version__"
# The commits of the published tags (a snapshot of the repository may lack the tags themselves).
TAGS = {"v1.19.0": "5a56187"}


def show(repo: Path, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def commit_of(repo: Path, ref: str) -> str:
    for candidate in (ref, TAGS.get(ref, ref)):
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    raise SystemExit(f"{ref!r} is neither a tag nor a commit of {repo}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--ref", default="v1.19.0")
    args = parser.parse_args()
    commit = commit_of(args.repo, args.ref)
    names = sorted({line.strip() for line in show(args.repo, commit, SOURCE).splitlines() if line.strip()})
    generated_with = " ".join(show(args.repo, commit, VERSIONS).split())
    header = [
        "# Operators with HPU kernels of Gaudi's own (HPU and AutogradHPU registrations), one per line.",
        f"# Source: https://github.com/HabanaAI/gaudi-pytorch-bridge, tag {args.ref} (commit {commit}), {SOURCE}",
        f"# ({VERSIONS} there: {generated_with}).",
        "# Generator: packages/habana-emulator/tests/data/generate_hpu_kernels.py. Do not edit by hand.",
    ]
    OUT.write_text("\n".join(header + names) + "\n")
    print(f"wrote {OUT} ({len(names)} operators)")


if __name__ == "__main__":
    main()
