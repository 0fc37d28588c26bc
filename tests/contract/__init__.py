"""Contract tests: one suite per port, run against every implementation of it."""
