"""Prefect flows: one per pipeline stage, plus the end-to-end chain."""
