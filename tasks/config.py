"""Settings tasks."""

from __future__ import annotations

from prefect import task

from config.settings import Profile, load_profile


@task
def load_settings(folder: str) -> Profile:
    """Load and validate a config folder (clusters, policy, demo)."""
    return load_profile(folder)
