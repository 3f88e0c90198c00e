"""The ``lightning-accel`` command: ``list`` plugins, print the ``env``, run the ``selftest``, ``fabric run`` a script.

``fabric run`` is Lightning's ``fabric run`` with the plugins' accelerators (``--accelerator hpu``).

Example:
    .. code-block:: console

        $ LIGHTNING_ACCEL_EMULATE=hpu lightning-accel list
        habana (lightning-accel-habana 0.1.0)
          accelerator hpu: emulated: ...
        $ lightning-accel env --json
        $ lightning-accel selftest --hpu --json
        $ lightning-accel fabric run --accelerator hpu --devices 8 train.py
        $ LIGHTNING_ACCEL_EMULATE=hpu lightning-accel preflight my_project.model:Net --format markdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, distributions, version
from typing import Any

from lightning_accel.core.__about__ import __version__
from lightning_accel.core.discovery import DISABLE_VAR, discovered_plugins
from lightning_accel.core.emulation import EMULATE_BACKEND_VAR, EMULATE_VAR, EMULATED_DEVICES_VAR, emulation_settings
from lightning_accel.core.errors import ConfigurationError

__all__ = ["main", "plugin_report", "environment_report"]

# Vendor SDK distributions that are not on PyPI; reported by `env` when present.
_SDK_DISTRIBUTIONS = ("habana-torch-plugin", "habana-torch-dataloader", "poptorch", "deepspeed")
_VARIABLES = (EMULATE_VAR, EMULATED_DEVICES_VAR, EMULATE_BACKEND_VAR, DISABLE_VAR, "LIGHTNING_ACCEL_AUTOLOAD")


def plugin_report() -> list[dict[str, Any]]:
    """Every discovered plugin with its accelerators, strategies and availability, as plain data."""
    report = []
    for plugin in discovered_plugins():
        availability = plugin.spec.check_availability()
        report.append(
            {
                "name": plugin.name,
                "distribution": plugin.distribution,
                "version": plugin.version,
                "availability": {
                    "state": availability.state,
                    "reason": availability.reason,
                    "devices": availability.devices,
                },
                "accelerators": [
                    {
                        "name": acc.name,
                        "description": acc.description,
                        "single_strategy": acc.single_strategy,
                        "parallel_strategy": acc.parallel_strategy,
                    }
                    for acc in plugin.spec.accelerators
                ],
                "strategies": [
                    {
                        "name": strategy.name,
                        "description": strategy.description,
                        "trainer": strategy.trainer is not None,
                        "fabric": strategy.fabric is not None,
                    }
                    for strategy in plugin.spec.strategies
                ],
                "precision": dict(plugin.spec.precision),
            }
        )
    return report


def _version_of(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _emulator_distributions() -> dict[str, str]:
    """Installed distributions that declare an emulated SDK (``lightning_accel.emulated_sdks.*``), with versions."""
    import _lightning_accel_sdk_aliases as sdk_aliases

    found: dict[str, str] = {}
    for dist in distributions():
        if any(entry.group.startswith(sdk_aliases.GROUP_PREFIX) for entry in dist.entry_points):
            found.setdefault(dist.metadata["Name"], dist.version)
    return dict(sorted(found.items()))


def environment_report() -> dict[str, Any]:
    """Versions and settings that a bug report needs."""
    try:
        settings: dict[str, Any] | str = {
            "emulated": sorted(emulation_settings().device_types)
            or ("all" if emulation_settings().emulate_all else []),
            "devices": emulation_settings().devices,
            "backend": emulation_settings().backend,
        }
    except ConfigurationError as exc:
        settings = f"invalid: {exc}"
    packages = ("lightning-accel-core", "torch", "lightning", "pytorch-lightning", "lightning-fabric")
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {name: _version_of(name) for name in packages},
        "plugins": {plugin.distribution: plugin.version for plugin in discovered_plugins()},
        "sdks": {name: _version_of(name) for name in _SDK_DISTRIBUTIONS},
        "emulators": _emulator_distributions(),
        "variables": {name: os.environ.get(name) for name in _VARIABLES},
        "emulation": settings,
        **_plugin_environment(),
    }


# `env`'s vendor lines: each plugin's PluginSpec.environment hook (the core never imports a vendor package itself).
def _plugin_environment() -> dict[str, dict[str, dict[str, str]]]:
    """``{"checks": {plugin: {label: line}}}`` from the plugins that declare an environment hook; empty when none."""
    from lightning_accel.core.plugin import import_target

    checks: dict[str, dict[str, str]] = {}
    for plugin in discovered_plugins():
        if not plugin.spec.environment:
            continue
        try:
            lines = import_target(plugin.spec.environment)()
            checks[plugin.name] = {str(label): str(line) for label, line in lines.items()}
        except Exception as exc:  # a broken vendor stack is reported, never a traceback in a bug-report command
            checks[plugin.name] = {"error": f"{plugin.spec.environment} failed: {type(exc).__name__}: {exc}"}
    return {"checks": checks} if checks else {}


def _print_list(report: list[dict[str, Any]]) -> None:
    if not report:
        print("No lightning-accel plugin is installed. Install one, e.g. `pip install 'lightning-accel[habana]'`.")
        return
    for plugin in report:
        availability = plugin["availability"]
        print(f"{plugin['name']} ({plugin['distribution']} {plugin['version']})")
        print(
            f"  availability: {availability['state']} ({availability['devices']} device(s)): {availability['reason']}"
        )
        for acc in plugin["accelerators"]:
            print(f"  accelerator {acc['name']!r}: {acc['description']}")
            print(f"    default strategy: {acc['single_strategy']!r} (1 device), {acc['parallel_strategy']!r} (more)")
        for strategy in plugin["strategies"]:
            where = "+".join(k for k in ("trainer", "fabric") if strategy[k])
            print(f"  strategy {strategy['name']!r} [{where}]: {strategy['description']}")
        for flag, description in plugin["precision"].items():
            print(f"  precision {flag!r}: {description}")


def _print_env(report: dict[str, Any]) -> None:
    print(f"lightning-accel-core {__version__}")
    print(f"python {report['python']} on {report['platform']}")
    for section in ("packages", "plugins", "sdks", "emulators", "variables"):
        print(f"{section}:")
        for name, value in report[section].items():
            print(f"  {name}: {value if value is not None else '-'}")
    print(f"emulation: {report['emulation']}")
    for plugin, lines in report.get("checks", {}).items():
        print(f"{plugin}:")
        for label, line in lines.items():
            print(f"  {label}: {line}")


def _selftest(args: argparse.Namespace) -> int:
    # Imported here: `list` and `env` must not pay for it.
    from lightning_accel.core.selftest import plan_checks, run_selftest
    from lightning_accel.core.selftest.display import ProgressDisplay, default_streams, format_summary

    device_types = [name for name in ("hpu", "ipu") if getattr(args, name)] or None
    try:
        planned = plan_checks(device_types)
    except ConfigurationError as exc:
        print(f"lightning-accel selftest: {exc}", file=sys.stderr)
        return 2
    results_to, bar_to = default_streams(args.json)
    report = run_selftest(device_types, progress=ProgressDisplay(len(planned), results_to, bar_to))
    if args.json:
        payload = {
            "summary": report.summary(),
            "checks": [result.as_dict() for result in report.results],
            "env": environment_report(),
        }
        print(json.dumps(payload, indent=2))
    else:
        print(format_summary(report))
    return 1 if report.failed else 0


def _preflight(argv: list[str]) -> int:
    """``preflight [--device TYPE] ARGS...``: hand ARGS to the preflight of the plugin that serves TYPE.

    The plugins own their pre-flight checks (the core imports no vendor code): a plugin declares one as
    ``PluginSpec.preflight``, and it parses its own arguments (``lightning-accel preflight --help`` shows them).
    """
    from lightning_accel.core.plugin import import_target

    device = None
    if argv[:1] == ["--device"] and len(argv) > 1:
        device, argv = argv[1], argv[2:]
    offered = {
        acc.name: plugin.spec
        for plugin in discovered_plugins()
        if plugin.spec.preflight
        for acc in plugin.spec.accelerators
    }
    if not offered:
        print(
            "lightning-accel preflight: no installed plugin offers a pre-flight check. Install one, e.g. "
            "`pip install 'lightning-accel[habana]'`.",
            file=sys.stderr,
        )
        return 2
    if device is None and len(offered) > 1:
        # The one device emulated here is the one meant (LIGHTNING_ACCEL_EMULATE=hpu); said, so it is never a guess.
        try:
            emulated = sorted(name for name in offered if emulation_settings().emulates(name))
        except ConfigurationError:
            emulated = []
        if len(emulated) != 1:
            print(
                f"lightning-accel preflight: several plugins offer a pre-flight check; choose one with --device "
                f"({', '.join(sorted(offered))}), e.g. `lightning-accel preflight --device ipu my.model:Net`.",
                file=sys.stderr,
            )
            return 2
        device = emulated[0]
        others = ", ".join(sorted(set(offered) - {device}))
        print(
            f"lightning-accel preflight: checking for {device}, the device {EMULATE_VAR} emulates "
            f"(--device {others} for the other).",
            file=sys.stderr,
        )
    spec = offered.get(device) if device is not None else next(iter(offered.values()))
    if spec is None:
        print(
            f"lightning-accel preflight: --device {device!r} has no pre-flight check. Accepted: "
            f"{', '.join(sorted(offered))}.",
            file=sys.stderr,
        )
        return 2
    run: Any = import_target(spec.preflight)
    return int(run(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    # `preflight` passes its arguments through to the plugin's own parser, so it is dispatched before this one's.
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["preflight"]:
        return _preflight(arguments[1:])
    parser = argparse.ArgumentParser(prog="lightning-accel", description="lightning-accel plugins and environment")
    parser.add_argument("--version", action="version", version=f"lightning-accel-core {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("list", "list installed plugins and their availability"),
        ("env", "print versions and settings"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--json", action="store_true", help="print JSON")
    selftest = commands.add_parser(
        "selftest", help="train small models on the devices present and report each check (exit 1 if one fails)"
    )
    selftest.add_argument("--hpu", action="store_true", help="only the Gaudi (HPU) checks")
    selftest.add_argument("--ipu", action="store_true", help="only the Graphcore (IPU) checks")
    selftest.add_argument("--json", action="store_true", help="print the report as JSON, with `env --json` inside")
    # `fabric run`: Lightning's command with the plugins' accelerators (lightning_accel.core.fabric_run).
    from lightning_accel.core.fabric_run import add_fabric_parser, run_fabric

    add_fabric_parser(commands)
    commands.add_parser(
        "preflight",
        help="run a few training steps and report what a model will meet on the device (`preflight --help`)",
        add_help=False,
    )
    args = parser.parse_args(argv)
    if args.command == "selftest":
        return _selftest(args)
    if args.command == "fabric":
        return run_fabric(args)
    if args.command == "list":
        plugins = plugin_report()
        print(json.dumps({"plugins": plugins}, indent=2)) if args.json else _print_list(plugins)
    else:
        env = environment_report()
        print(json.dumps(env, indent=2)) if args.json else _print_env(env)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
