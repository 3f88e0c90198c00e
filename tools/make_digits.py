"""Write the bundled 8x8 digits (UCI "Optical Recognition of Handwritten Digits", test part, 1,797 images; CC BY 4.0).

The tests, the conformance kit and the examples read this file instead of importing scikit-learn, whose scipy makes
every Python start that imports Lightning about a second slower (torchmetrics imports ``scipy.signal`` when it is
there): the multi-process tests start hundreds of them. Made once, from scikit-learn's copy of the same data:

    python tools/make_digits.py      # needs scikit-learn; writes both copies

The file is ``torch.save({"features": uint8 [1797, 64] in 0..16, "labels": uint8 [1797]})``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ROOT / "packages/core/src/lightning_accel/core/testing/digits.pt"
EXAMPLES = ROOT / "examples/digits.pt"


def main() -> None:
    """Write both copies from scikit-learn's digits, each atomically."""
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    data = {"features": torch.tensor(features, dtype=torch.uint8), "labels": torch.tensor(labels, dtype=torch.uint8)}
    if not torch.equal(data["features"].double(), torch.tensor(features)):
        raise SystemExit("the digits' pixels are not whole numbers in 0..16: scikit-learn's copy changed")
    partial = PACKAGED.with_suffix(".pt.partial")
    torch.save(data, partial)
    partial.replace(PACKAGED)
    shutil.copyfile(PACKAGED, EXAMPLES.with_suffix(".pt.partial"))
    EXAMPLES.with_suffix(".pt.partial").replace(EXAMPLES)
    print(f"wrote {PACKAGED.relative_to(ROOT)} and {EXAMPLES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
