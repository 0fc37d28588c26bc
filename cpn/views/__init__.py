"""Read-models: the scheduler's state as people read it, kept apart from the engine that decides.

decision_table: one round's decision table (the `schedule-round` flow's artifact) and a round limited to
some clusters; team_board: each team's standing (`cpn teams`, `GET /teams`, the web UI's clusters page).
"""
