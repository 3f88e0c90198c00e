"""The bundled 8x8 digits: the UCI set scikit-learn ships, whole, and the same file as the examples read."""

from __future__ import annotations

from pathlib import Path

import torch

from lightning_accel.core.testing import digits_tensors, load_digits

EXAMPLES_COPY = Path(__file__).resolve().parents[3] / "examples" / "digits.pt"


def test_the_digits_are_the_whole_uci_test_set():
    features, labels = load_digits()
    assert features.shape == (1797, 64) and labels.shape == (1797,)
    assert features.dtype == labels.dtype == torch.uint8
    assert int(features.min()) == 0 and int(features.max()) == 16
    # The class sizes of the UCI "optdigits" test part (scikit-learn's load_digits has the same).
    assert torch.bincount(labels.long()).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert int(features.long().sum()) == 561_718


def test_the_split_is_the_same_every_time_and_scaled_to_one():
    first, second = digits_tensors(), digits_tensors()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    x_train, y_train, x_val, y_val = first
    assert (len(x_train), len(x_val)) == (1437, 360)
    assert float(x_train.max()) == 1.0 and y_train.dtype == y_val.dtype == torch.long


def test_the_examples_read_the_same_file():
    packaged = Path(load_digits.__code__.co_filename).with_name("digits.pt")
    assert EXAMPLES_COPY.read_bytes() == packaged.read_bytes()
