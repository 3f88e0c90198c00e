"""Stand-in for the Poplar SDK's poptorch (see ../README.md): a system with four IPUs."""

__version__ = "3.4.0+standin"
STANDIN = True


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    return num_ipus <= 4


class Options:
    """Only so that type checks against ``poptorch.Options`` have a class to look at."""
