"""The 8x8 handwritten digits bundled with this package, for tests and examples that need a small real task.

The data is the test part of the UCI "Optical Recognition of Handwritten Digits" set (E. Alpaydin, C. Kaynak, 1998;
CC BY 4.0): 1,797 images, 64 pixels each with values 0 to 16, and their labels. It is the same data scikit-learn
bundles as ``load_digits``; shipping it here spares every test process scikit-learn's import cost
(``tools/make_digits.py`` made it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

__all__ = ["load_digits"]


def load_digits() -> tuple[Tensor, Tensor]:
    """The digits' pixels (uint8, shape ``[1797, 64]``, values 0 to 16) and labels (uint8, shape ``[1797]``).

    Example:
        >>> features, labels = load_digits()
        >>> features.shape, labels.shape
        (torch.Size([1797, 64]), torch.Size([1797]))
        >>> x, y = features.float() / 16, labels.long()
    """
    data = torch.load(Path(__file__).with_name("digits.pt"), weights_only=True)
    return data["features"], data["labels"]
