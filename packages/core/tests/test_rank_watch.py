"""The rank watchers' settings and words (their behaviour with real processes is tested in the Habana suite)."""

from __future__ import annotations

import pytest

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.rank_watch import INTERVAL_VARIABLE, describe_status, watch_interval


@pytest.mark.parametrize(
    ("returncode", "words"),
    [
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (-9, "was killed by SIGKILL (signal 9)"),
        (-15, "was killed by SIGTERM (signal 15)"),
    ],
)
def test_how_a_rank_ended_is_said_in_words(returncode: int, words: str) -> None:
    assert describe_status(returncode) == words


def test_the_interval_defaults_to_one_second_and_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INTERVAL_VARIABLE, raising=False)
    assert watch_interval() == 1.0
    monkeypatch.setenv(INTERVAL_VARIABLE, "0.25")
    assert watch_interval() == 0.25


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_an_interval_that_is_not_a_positive_number_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(INTERVAL_VARIABLE, value)
    with pytest.raises(ConfigurationError) as error:
        watch_interval()
    assert str(error.value) == (
        f"LIGHTNING_ACCEL_RANK_WATCH_INTERVAL={value!r} is not a number of seconds. Accepted: a positive number such "
        "as 0.5 or 2 (default 1). Fix: set it to a positive number, or unset it."
    )
