"""The pre-flight report: findings, and their rendering as a terminal table, Markdown and JSON."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FORMATS", "Finding", "Report", "render"]

#: The accepted values of ``--format`` / ``render(format=...)``.
FORMATS = ("table", "markdown", "json")

# The kinds of findings, in the order the report lists them, with their titles.
KINDS = {
    "cpu_fallback": "CPU fallback",
    "recompilation": "Graph recompilation",
    "graph_break": "hpu_backend graph break",
    "host_sync": "Host synchronisation",
    "dtype": "dtype hazard",
    "autocast_fp32": "float32 under bf16 autocast",
    "memory": "Device memory per rank",
    "not_run": "Mode not run",
}


@dataclass
class Finding:
    """One thing the model will meet on Gaudi.

    Attributes:
        kind: One of ``cpu_fallback``, ``recompilation``, ``graph_break``, ``host_sync``, ``dtype``,
            ``autocast_fp32``, ``memory``, ``not_run``.
        mode: The execution mode it was seen in: ``lazy`` or ``compile`` (eager with ``hpu_backend``).
        what: What was seen (the operator, the guard that failed...).
        where: ``file:line`` in the user's code, or ``""`` when the run did not show it.
        why: Why it matters on the hardware.
        fix: How to avoid it.
        count: How many times it was seen over the steps run.
        details: Extra facts (shapes, dtypes, per-step counts).

    Example:
        >>> Finding("host_sync", "lazy", "aten::_local_scalar_dense", "model.py:12", "waits", "log tensors").kind
        'host_sync'
    """

    kind: str
    mode: str
    what: str
    where: str
    why: str
    fix: str
    count: int = 1
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The finding as plain data."""
        return asdict(self)


@dataclass
class Report:
    """The findings of a pre-flight run over one or more modes.

    Attributes:
        target: What was checked (``module:Class`` or the model's class name).
        steps: Training steps run per mode.
        modes: Per mode run, facts about the run (steps run, graphs compiled, host copies per step...).
        findings: The findings, each once per mode.

    Example:
        >>> report = Report("my.model:Net", 3)
        >>> render(report, "json").startswith("{")
        True
    """

    target: str
    steps: int
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``--format json`` prints)."""
        return {
            "target": self.target,
            "steps": self.steps,
            "emulated": any(mode.get("emulated") for mode in self.modes.values()),
            "modes": self.modes,
            "findings": [finding.as_dict() for finding in self.sorted_findings()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Rebuild a report from :meth:`as_dict`'s output."""
        return cls(
            target=data["target"],
            steps=data["steps"],
            modes=dict(data.get("modes", {})),
            findings=[Finding(**finding) for finding in data.get("findings", [])],
        )

    def merge(self, other: Report) -> None:
        """Add another mode's run to this report."""
        self.modes.update(other.modes)
        self.findings.extend(other.findings)

    def sorted_findings(self) -> list[Finding]:
        """The findings by kind (the report's order), then mode and place."""
        order = {kind: index for index, kind in enumerate(KINDS)}
        return sorted(self.findings, key=lambda f: (order.get(f.kind, len(order)), f.mode, f.where, f.what))

    def of_kind(self, kind: str, mode: str | None = None) -> list[Finding]:
        """The findings of one kind (and mode, when given)."""
        return [f for f in self.findings if f.kind == kind and (mode is None or f.mode == mode)]


def _mode_line(name: str, facts: Mapping[str, Any]) -> str:
    # The memory profile is shown as the memory findings it gives.
    parts = [f"{key.replace('_', ' ')}: {value}" for key, value in facts.items() if key not in ("emulated", "memory")]
    return f"{name}: " + ", ".join(parts)


def _markdown(report: Report) -> str:
    lines = [f"# Pre-flight report for Gaudi: `{report.target}`", ""]
    if any(mode.get("emulated") for mode in report.modes.values()):
        lines += ["Run on the emulated HPU: what it shows is what the emulator saw, not a hardware measurement.", ""]
    lines += [f"{report.steps} training step(s) per mode.", ""]
    lines += [f"- {_mode_line(name, facts)}" for name, facts in report.modes.items()]
    lines.append("")
    findings = report.sorted_findings()
    if not findings:
        lines.append("No findings.")
        return "\n".join(lines) + "\n"
    lines += ["| Kind | Mode | What | Where | Count | Why | Fix |", "|---|---|---|---|---|---|---|"]
    for f in findings:
        cells = [KINDS.get(f.kind, f.kind), f.mode, f"`{f.what}`", f"`{f.where}`" if f.where else "-", str(f.count)]
        cells += [f.why, f.fix]
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width) or [""]


def _table(report: Report, width: int = 110) -> str:
    out = [f"Pre-flight report for Gaudi: {report.target} ({report.steps} step(s) per mode)"]
    if any(mode.get("emulated") for mode in report.modes.values()):
        out.append("(run on the emulated HPU)")
    out += [f"  {_mode_line(name, facts)}" for name, facts in report.modes.items()]
    findings = report.sorted_findings()
    if not findings:
        out.append("No findings.")
        return "\n".join(out) + "\n"
    headers = ("kind", "mode", "what", "where", "count")
    rows = [(KINDS.get(f.kind, f.kind), f.mode, f.what, f.where or "-", str(f.count)) for f in findings]
    widths = [min(max(len(h), *(len(r[i]) for r in rows)), 40) for i, h in enumerate(headers)]
    sep = "-+-".join("-" * w for w in widths)
    out += [sep, " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), sep]
    for f, row in zip(findings, rows, strict=True):
        cells = [_wrap(cell, w) for cell, w in zip(row, widths, strict=True)]
        for i in range(max(len(c) for c in cells)):
            out.append(
                " | ".join((c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
            )
        for label, text in (("why", f.why), ("fix", f.fix)):
            out += ["    " + line for line in _wrap(f"{label}: {text}", width - 4)]
    out.append(sep)
    return "\n".join(out) + "\n"


def render(report: Report, format: str = "table") -> str:
    """The report as text: ``"table"`` (terminal), ``"markdown"`` or ``"json"``.

    Raises:
        ValueError: For another ``format``.
    """
    if format == "json":
        return json.dumps(report.as_dict(), indent=2) + "\n"
    if format == "markdown":
        return _markdown(report)
    if format == "table":
        return _table(report)
    raise ValueError(f"format={format!r} is not a report format. Accepted: {', '.join(FORMATS)}.")


def merge_reports(reports: Iterable[Report], target: str, steps: int) -> Report:
    """One report holding every mode's findings."""
    merged = Report(target, steps)
    for report in reports:
        merged.merge(report)
    return merged
