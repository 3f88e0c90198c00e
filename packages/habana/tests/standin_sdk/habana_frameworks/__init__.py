"""Stand-in for the Habana SDK's top-level package (tests only)."""
