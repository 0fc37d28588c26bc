"""The task runs one scheduling round shows in Prefect, as a person reads them in the flow's graph."""

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
