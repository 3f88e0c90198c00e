"""Reading and checking autocast operator lists: the SDK's format, one ATen operator name per line.

The SDK reads each line of a list file as it is (gaudi-pytorch-bridge ``autocast_helpers.cpp``): a name with spaces
around it, a trailing comment or a Windows line ending matches no operator and is silently ignored there. So the
plugin refuses such lines, and names that are no ATen operator, before the file reaches the SDK. Blank lines and lines
starting with ``#`` are allowed (they name no operator on the SDK either).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from lightning_accel.core.errors import ConfigurationError

from ._operators import SDK_ONLY_NAMES, aten_operator_names, is_functional_name

__all__ = ["read_operator_list"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORMAT = (
    "one ATen operator name per line (e.g. 'linear', 'softmax', 'cross_entropy_loss'), nothing else on the line; "
    "blank lines and lines starting with '#' allowed"
)


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
        what = "a directory, not a file" if Path(path).is_dir() else "no such file"
        raise ConfigurationError(
            f"{argument}={str(path)!r}: {what}. Accepted: the path of a text file with {_FORMAT}. Check the "
            "path (relative paths start from the working directory) or leave the argument out for the default list."
        )
    try:
        with file.open(encoding="utf-8", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"{argument}={str(path)!r} cannot be read ({exc}). Accepted: a readable UTF-8 text file with {_FORMAT}."
        ) from exc
    names: set[str] = set()
    known = aten_operator_names() | SDK_ONLY_NAMES
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{argument}={str(path)!r}, line {number}"
        if line != line.strip():
            raise ConfigurationError(
                f"{where}: {line!r} has spaces or a line ending ('\\r') around the name, which the SDK keeps as part "
                f"of the name, so it would match no operator. Accepted: {_FORMAT}. Remove them (save with Unix line "
                "endings)."
            )
        if not _NAME.match(line):
            raise ConfigurationError(
                f"{where}: {line!r} is not an operator name. Accepted: {_FORMAT}. Put each name on its own line, "
                "without commas, quotes, dtypes or trailing comments."
            )
        if line not in known:
            close = difflib.get_close_matches(line, sorted(known), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigurationError(
                f"{where}: {line!r} is not an ATen operator.{hint} Accepted: ATen operator names, as in the SDK's own "
                "lists (e.g. 'linear', 'matmul', 'softmax', 'cross_entropy_loss'; torch.nn.functional.cross_entropy "
                "is 'cross_entropy_loss')."
            )
        if not is_functional_name(line):
            raise ConfigurationError(
                f"{where}: {line!r} is an in-place, out= or backward operator, which the SDK's autocast never casts. "
                "Accepted: functional operators; name the functional form instead (e.g. 'add' for 'add_' or "
                "'add_out')."
            )
        names.add(line)
    return frozenset(names)
