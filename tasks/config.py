"""Settings tasks."""

from __future__ import annotations

from prefect import task

from config.runtime import runtime_settings
from config.settings import Profile, load_profile


@task
def load_settings(folder: str) -> Profile:
    """Load and validate a config folder (clusters, policy, demo), with the policy `cpn up` was given
    (CPN_POLICY, CPN_POLICY_SET) applied to its policy.yaml, so a flow run decides as the service does."""
    profile = load_profile(folder)
    settings = runtime_settings()
    policy = profile.policy.overridden(settings.policy or None, settings.policy_overrides)
    return profile.model_copy(update={"policy": policy})
