"""Prefect tasks: thin wrappers, one per pipeline step, with no logic of their own."""
