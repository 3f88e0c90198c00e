"""The conformance kit: pytest base classes that every vendor package subclasses.

Like LangChain's standard tests, each base class holds tests; a vendor package subclasses it in its own
``tests/`` with a few class attributes, and pytest collects the inherited tests (the base classes' names do not
start with ``Test``, so they are not collected on their own).

Example:
    .. code-block:: python

        # packages/habana/tests/test_conformance.py
        from lightning_accel.core.testing import AcceleratorConformance


        class TestHPUConformance(AcceleratorConformance):
            accelerator = "hpu"
            single_strategy = "hpu_single"
            parallel_strategy = "hpu_parallel"
"""

from lightning_accel.core.testing.conformance import AcceleratorConformance, FabricConformance
from lightning_accel.core.testing.digits import load_digits
from lightning_accel.core.testing.models import DigitsClassifier, DigitsDataModule, digits_tensors

__all__ = [
    "AcceleratorConformance",
    "DigitsClassifier",
    "DigitsDataModule",
    "FabricConformance",
    "digits_tensors",
    "load_digits",
]
