"""The job store's tables as SQLAlchemy Core sees them: names and columns only (their types and indexes
are the migrations', cpn/migrations/versions), shared by the store's parts."""

from __future__ import annotations

from sqlalchemy import column, table

JOBS = table(
    "jobs",
    *map(
        column,
        (
            "seq",  # acceptance order
            "job_id",
            "spec",  # canonical JSON of the JobSpec, manifest included
            "state",
            "cluster",
            "node",
            "location",  # cluster holding the job's image and data now
            "submitted_at",
            "updated_at",
            "placement",  # JSON [[node, cards], ...] of the gang while placed
            "wait_code",  # why it waits (cpn.decisions.WaitCode), latest round
            "wait_detail",
            "predicted_start",  # when the latest plan starts it
            "first_predicted_start",  # the first start any plan gave it
            "image",  # the image to run, pinned by digest once migrated
            "needs_more_than_gb",  # GPU memory per card it was OOM-killed with
            "predicted_end",  # when the latest forward look ends it (inf: a service)
            "start_low",  # the interval its predicted start may fall in
            "start_high",
            "moved",  # why its predicted start last moved (NULL: it has not)
        ),
    ),
)
"""Every accepted job, one row each (columns and their types: cpn/migrations/versions)."""

TRANSITIONS = table(
    "transitions",
    *map(
        column,
        (
            "seq",
            "job_id",
            "from_state",
            "to_state",
            "time",
            "reason",
            "cluster",
            "node",
            "gpu_mem_gb",
            "log_tail",
            "cause",  # cpn.jobs.Cause: what the transition counts as (retries)
            "term",  # the scheduler lease's term an assignment or submission was recorded under
        ),
    ),
)
"""Every state change of every job, in the order recorded; `from_state` NULL for a job's entry."""

CANCEL_REQUESTS = table("cancel_requests", column("job_id"), column("requested_by"), column("requested_at"))
"""Cancels asked for jobs on a cluster, one per job, until the scheduler carries them out."""

LEASE = table("scheduler_lease", column("id"), column("holder"), column("term"), column("expires_at"))
"""The scheduler lease: one row (id 1) once any process took it."""

STORE_META = table("store_meta", column("key"), column("value"))
"""Facts about the store itself, by key (`COPY_IN_PROGRESS`)."""

SIM_JOURNAL = table("sim_journal", column("seq"), column("entry"), column("term"))
"""What simulated clusters were asked to run, one JSON entry a row (cpn.sim.journal), in a server's store."""

CLUSTERS = table("clusters", *map(column, ("seq", "name", "spec", "state", "added_at")))
"""The cluster set (cpn.adapters.clusters.ClusterBook): one row per cluster, in the order they were added."""
