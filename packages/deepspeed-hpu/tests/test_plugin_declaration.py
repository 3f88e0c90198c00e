import json
import subprocess
import sys

from lightning_accel.core import discovered_plugins


def test_plugin_is_discovered_and_honest_about_its_state() -> None:
    plugin = next(p for p in discovered_plugins() if p.name == "deepspeed_hpu")
    assert plugin.distribution == "lightning-accel-deepspeed-hpu"
    availability = plugin.spec.check_availability()
    assert availability.state == "unavailable"
    assert "HPUDeepSpeedStrategy is not implemented" in availability.reason


def test_listed_by_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lightning_accel.core.cli", "list", "--json"], capture_output=True, text=True, check=True
    )
    names = [plugin["name"] for plugin in json.loads(out.stdout)["plugins"]]
    assert "deepspeed_hpu" in names
