"""Reading and checking mixed-precision operator lists (one operator name per line, ``#`` starts a comment)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from lightning_accel.core.errors import ConfigurationError

from ._operators import known_operators

__all__ = ["read_operator_list"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORMAT = "one operator name per line (e.g. 'linear'), blank lines and '#' comments allowed"


def read_operator_list(path: str | Path, argument: str) -> frozenset[str]:
    """The operator names in the file at ``path``.

    Args:
        path: The list file.
        argument: The argument that named the file, for error messages (e.g. ``"bf16_file_path"``).

    Raises:
        ConfigurationError: When the file is missing, unreadable or malformed, or names an unknown operator.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError(
            f"{argument}={str(path)!r}: no such file. Accepted: the path of a text file with {_FORMAT}. Check the "
            "path (relative paths start from the working directory) or leave the argument out for the default list."
        )
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"{argument}={str(path)!r} cannot be read ({exc}). Accepted: a readable UTF-8 text file with {_FORMAT}."
        ) from exc
    names: set[str] = set()
    known = known_operators()
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not _NAME.match(name):
            raise ConfigurationError(
                f"{argument}={str(path)!r}, line {number}: {line.strip()!r} is not an operator name. Accepted: "
                f"{_FORMAT}. Put each name on its own line, without commas, quotes or dtypes."
            )
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigurationError(
                f"{argument}={str(path)!r}, line {number}: {name!r} is not a known operator.{hint} Accepted: names of "
                "functions in torch, torch.nn.functional or methods of torch.Tensor (e.g. 'linear', 'softmax', "
                "'matmul')."
            )
        names.add(name)
    return frozenset(names)
