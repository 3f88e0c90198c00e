"""The standard-library stand-ins that keep the core and Graphcore packages on Python 3.8."""

from __future__ import annotations

import pytest

from lightning_accel.core.pycompat import entry_points_of, strict_zip


def test_strict_zip_pairs_items_and_refuses_different_lengths() -> None:
    assert list(strict_zip([1, 2], "ab")) == [(1, "a"), (2, "b")]
    with pytest.raises(ValueError, match=r"strict_zip\(\) argument\(s\) \[2\] shorter than the others"):
        list(strict_zip([1, 2], "a"))


def test_entry_points_come_with_their_distribution() -> None:
    found = {entry.name: dist for entry, dist in entry_points_of("lightning_accel.plugins")}
    assert found["testplugin"] is not None
    assert found["testplugin"].metadata["Name"] == "lightning-accel-testplugin"
