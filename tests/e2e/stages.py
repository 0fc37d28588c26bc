"""The task runs one scheduling round shows in Prefect, as a person reads them in the flow's graph: the
stages of `cpn.engine.scheduler.run_stages`, each a task of `flows/schedule.py` `TaskStages`
(`record-waiting` in a round that explains; a dry run runs only snapshot-and-estimates, optimise and
publish-decisions)."""

ROUND_STAGES = frozenset(
    {
        "collect",
        "track-completions",
        "cancel",
        "snapshot-and-estimates",
        "optimise",
        "publish-decisions",
        "assign",
        "migrate",
        "submit",
        "record-waiting",
    }
)
