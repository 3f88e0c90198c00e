"""``lightning-accel fabric run``: Lightning's ``fabric run``, with the accelerators of the installed plugins.

Lightning's ``fabric run`` fixes its ``--accelerator`` choices when it is imported (``cpu``, ``gpu``, ``cuda``, ``mps``,
``tpu``, ``auto``), so ``fabric run --accelerator hpu`` is refused with a list that never mentions HPUs. This command
takes the same options, accepts an installed plugin's accelerator besides Lightning's, and launches the script as
Lightning does: the ``LT_*`` variables that ``Fabric()`` reads in each process, then ``torchrun`` with the same
``--nproc_per_node``, ``--nnodes``, ``--node_rank``, ``--master_addr`` and ``--master_port``. For Lightning's own
accelerators it hands the arguments to Lightning's ``fabric run`` itself.

Example:
    .. code-block:: console

        $ lightning-accel fabric run --accelerator hpu --devices 8 --precision bf16-mixed train.py --lr 0.1
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from lightning_accel.core.discovery import discovered_plugins
from lightning_accel.core.errors import ConfigurationError

__all__ = ["add_fabric_parser", "run_fabric"]


def add_fabric_parser(commands: Any) -> None:
    """Add ``fabric run`` to the ``lightning-accel`` subcommands (``commands``, from ``add_subparsers``)."""
    fabric = commands.add_parser("fabric", help="Lightning Fabric's commands, with the installed plugins' devices")
    actions = fabric.add_subparsers(dest="fabric_command", required=True)
    run = actions.add_parser(
        "run",
        help="run a Fabric script on several devices and nodes, as `fabric run` does (accelerator='hpu' included)",
        description="Run a Lightning Fabric script with torchrun, as Lightning's `fabric run` does; --accelerator "
        "also accepts the installed plugins' accelerators (`lightning-accel list`).",
    )
    run.add_argument("script", help="the Python script to run; it creates a Fabric object")
    run.add_argument("--accelerator", default=None, help="Lightning's accelerators or a plugin's (e.g. hpu)")
    run.add_argument("--strategy", default=None, help="a strategy name Fabric knows (e.g. ddp, hpu_parallel)")
    run.add_argument("--devices", default="1", help="devices per node: a number or 'auto' (default 1)")
    run.add_argument("--num-nodes", "--num_nodes", dest="num_nodes", type=int, default=1, help="number of nodes")
    run.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0, help="this node's index")
    run.add_argument(
        "--main-address", "--main_address", dest="main_address", default="127.0.0.1", help="the main node's address"
    )
    run.add_argument("--main-port", "--main_port", dest="main_port", type=int, default=29400, help="the main port")
    run.add_argument("--precision", default=None, help="a precision Fabric knows (e.g. bf16-mixed)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed on to the script")


def _plugin_accelerators() -> dict[str, Any]:
    """Plugin accelerator name -> (plugin, accelerator spec)."""
    return {acc.name: (plugin, acc) for plugin in discovered_plugins() for acc in plugin.spec.accelerators}


def _lightning_choices() -> tuple[tuple[str, ...], list[str], tuple[str, ...]]:
    """Lightning's ``fabric run`` choices: accelerators, strategies (with the plugins' registered), precisions."""
    import lightning.fabric  # noqa: F401  (registers the plugins' strategies in Fabric's registry)

    from lightning_accel.core.compat import fabric_cli_choices

    return fabric_cli_choices()


def _number_of_processes(devices: str, accelerator: str, available: int) -> int:
    if devices == "auto":
        return available
    try:
        count = int(devices)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigurationError(
            f"lightning-accel fabric run: --devices {devices!r} is not accepted with --accelerator {accelerator}. "
            "Accepted: a number of devices per node (e.g. --devices 8) or 'auto' (every visible device)."
        )
    if count > available:
        raise ConfigurationError(
            f"lightning-accel fabric run: --devices {count} asks for more {accelerator.upper()}s than this node has "
            f"({available}). Pass --devices {available} or fewer, or 'auto'."
        )
    return count


def _check(args: argparse.Namespace) -> int | None:
    """Validate ``args``; the number of processes per node for a plugin's accelerator, ``None`` for Lightning's."""
    accelerators, strategies, precisions = _lightning_choices()
    plugins = _plugin_accelerators()
    fabric_plugins = {name: entry for name, entry in plugins.items() if entry[1].fabric is not None}
    if not os.path.isfile(args.script):
        raise ConfigurationError(f"lightning-accel fabric run: the script {args.script!r} does not exist.")
    if args.accelerator is not None and args.accelerator not in accelerators and args.accelerator not in plugins:
        raise ConfigurationError(
            f"lightning-accel fabric run: --accelerator {args.accelerator!r} is not known. Accepted: Lightning's "
            f"{', '.join(accelerators)}, and the installed plugins' {', '.join(sorted(fabric_plugins)) or '(none)'} "
            "(`lightning-accel list` shows the plugins)."
        )
    if args.accelerator in plugins and args.accelerator not in fabric_plugins:
        raise ConfigurationError(
            f"lightning-accel fabric run: --accelerator {args.accelerator!r} ({plugins[args.accelerator][0].name}) "
            "has no Fabric support; train on it with the Trainer. Fabric accelerators: "
            f"{', '.join(accelerators)}, {', '.join(sorted(fabric_plugins)) or '(no plugin)'}."
        )
    if args.strategy is not None and args.strategy not in strategies:
        raise ConfigurationError(
            f"lightning-accel fabric run: --strategy {args.strategy!r} is not accepted. Accepted: "
            f"{', '.join(strategies)}."
        )
    if args.precision is not None and args.precision not in precisions:
        raise ConfigurationError(
            f"lightning-accel fabric run: --precision {args.precision!r} is not accepted. Accepted: "
            f"{', '.join(precisions)}."
        )
    if args.accelerator not in fabric_plugins:
        return None
    plugin = fabric_plugins[args.accelerator][0]
    availability = plugin.spec.check_availability()
    if not availability.usable:
        raise ConfigurationError(
            f"lightning-accel fabric run: --accelerator {args.accelerator!r} cannot run here: {availability.reason}"
        )
    return _number_of_processes(str(args.devices), args.accelerator, availability.devices)


def run_fabric(args: argparse.Namespace) -> int:
    """Launch ``args.script`` as ``fabric run`` does; returns the exit status (2 for refused arguments)."""
    import sys

    try:
        processes = _check(args)
    except ConfigurationError as exc:
        print(exc, file=sys.stderr)
        return 2
    script_args = list(args.script_args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    if processes is None:  # one of Lightning's accelerators: Lightning's own command, unchanged
        from lightning.fabric.cli import main as lightning_fabric_run

        lightning_fabric_run(argparse.Namespace(**vars(args)), script_args)
        return 0
    _launch(args, processes, script_args)
    return 0


def _launch(args: argparse.Namespace, processes: int, script_args: Sequence[str]) -> None:
    """Lightning's launch: the ``LT_*`` variables ``Fabric()`` reads, then torchrun in this process."""
    import torch.distributed.run as torchrun

    # The variables Lightning's `fabric run` sets; Fabric's connector reads them in every process of the run.
    os.environ["LT_CLI_USED"] = "1"
    os.environ["LT_ACCELERATOR"] = str(args.accelerator)
    if args.strategy is not None:
        os.environ["LT_STRATEGY"] = str(args.strategy)
    os.environ["LT_DEVICES"] = str(args.devices)
    os.environ["LT_NUM_NODES"] = str(args.num_nodes)
    if args.precision is not None:
        os.environ["LT_PRECISION"] = str(args.precision)
    # As Lightning does: share the host's cores among this node's processes unless the user chose.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    torchrun.main(
        [
            f"--nproc_per_node={processes}",
            f"--nnodes={args.num_nodes}",
            f"--node_rank={args.node_rank}",
            f"--master_addr={args.main_address}",
            f"--master_port={args.main_port}",
            args.script,
            *script_args,
        ]
    )
