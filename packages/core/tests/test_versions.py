"""Lightning 2.3 to 2.6: the core's range, each plugin's declared range, and the 2.1/2.2 auto-accelerator shape."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from packaging.version import Version

from lightning_accel.core import PluginLoadWarning, PluginSpec
from lightning_accel.core.compat import TESTED_LIGHTNING, TRIGGERS, Tree
from lightning_accel.core.discovery import DiscoveredPlugin, discovered_plugins
from lightning_accel.core.registration import supports_installed_lightning
from lightning_accel.core.selection import _wrap_choose_auto_accelerator


def _plugin(lightning: str) -> DiscoveredPlugin:
    test_plugin = next(p for p in discovered_plugins() if p.name == "testplugin")
    return dataclasses.replace(test_plugin, spec=dataclasses.replace(test_plugin.spec, lightning=lightning))


def test_core_supports_lightning_2_3_to_2_6() -> None:
    assert TESTED_LIGHTNING == (Version("2.3.0"), Version("2.7.0"))


@pytest.mark.parametrize(
    ("declared", "installed", "supported"),
    [
        ("", "2.3.3", True),
        (">=2.3,<2.7", "2.6.6", True),
        (">=2.6,<2.7", "2.3.3", False),
        (">=2.6,<2.7", "2.6.0rc1", True),  # a pre-release of a supported version counts as it
    ],
)
def test_plugin_range(declared: str, installed: str, supported: bool) -> None:
    assert _plugin(declared).spec.supports_lightning(installed) is supported


def test_a_plugin_outside_its_range_is_not_registered_with_a_warning_naming_everything() -> None:
    plugin = _plugin(">=2.7,<2.8")
    tree = TRIGGERS["pytorch_lightning"]
    with pytest.warns(PluginLoadWarning) as record:
        assert supports_installed_lightning(plugin, tree, Version("2.6.6")) is False
    message = str(record[0].message)
    assert "plugin 'testplugin' (lightning-accel-testplugin" in message
    assert "supports Lightning >=2.7,<2.8, but pytorch-lightning 2.6.6 is installed" in message
    assert "not registered into pytorch_lightning" in message
    assert "pip install 'pytorch-lightning>=2.7,<2.8'" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert supports_installed_lightning(_plugin(">=2.6,<2.7"), tree, Version("2.6.6")) is True


def test_a_malformed_range_names_the_plugin_and_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"PluginSpec\(name='x', lightning='2.6\+'\): not a version specifier"):
        PluginSpec(name="x", distribution="x", accelerators=(), strategies=(), availability="x:y", lightning="2.6+")


@pytest.mark.parametrize("shape", ["staticmethod", "instance method (Lightning 2.1/2.2)"])
def test_auto_accelerator_wrap_calls_either_shape(shape: str) -> None:
    seen: list[object] = []

    class Connector:
        _strategy_flag = "auto"

        if shape == "staticmethod":

            @staticmethod
            def _choose_auto_accelerator() -> str:
                seen.append("static")
                return "cpu"

        else:

            def _choose_auto_accelerator(self) -> str:  # type: ignore[misc]
                seen.append(self)
                return "cpu"

    _wrap_choose_auto_accelerator(Tree("no_such_tree", "pytorch", "lightning", "lightning"), Connector)
    connector = Connector()
    assert connector._choose_auto_accelerator() == "cpu"
    assert seen == (["static"] if shape == "staticmethod" else [connector])


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("json:loads", "availability check failed: TypeError: "),  # the function raises
        ("no_such_vendor_module:availability", "availability check failed: ModuleNotFoundError: "),
    ],
)
def test_an_availability_function_that_raises_reports_unavailable_with_its_error(target: str, reason: str) -> None:
    spec = PluginSpec(name="x", distribution="x", accelerators=(), strategies=(), availability=target)
    availability = spec.check_availability()
    assert (availability.state, availability.usable, availability.devices) == ("unavailable", False, 0)
    assert availability.reason.startswith(reason)
