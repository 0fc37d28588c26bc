"""A service that has seen 100,000 jobs holds no more memory than one that has seen 10,000 (issue #8)."""

from __future__ import annotations

import pytest

from cpn.perf.memory import memory_profile

pytestmark = pytest.mark.integration


def test_memory_after_100k_jobs_is_within_10_percent_of_after_10k(tmp_path):
    marks = memory_profile(
        tmp_path / "jobs.db",
        100_000,
        [10_000, 50_000, 100_000],
        batch=1_000,
        progress=lambda done, mb: print(f"{done} jobs: {mb:.1f} MB", flush=True),
    )
    print(f"resident memory: {marks}")
    assert marks[100_000] <= 1.10 * marks[10_000], marks
