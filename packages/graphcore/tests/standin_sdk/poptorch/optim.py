"""Stand-in for poptorch.optim (see ../../README.md)."""
