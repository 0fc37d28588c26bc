"""Simulated clusters: a deterministic executor behind the ClusterGateway port, and its ground truth.

`gateway` holds the event-driven SimulatedGateway; `truth` the rate / failure oracle over the
measured throughput tables, built from `scaling` (GPU counts beyond the table), `colocation` (jobs
sharing a card) and `memory` (the documented GPU memory model). Around the production engine:
`replay` drives its Scheduler through simulated time, `generated` makes seeded queues, `estimates`
serves the truth (or a noisy copy) as an estimate source, and `driver` keeps simulated clusters on the
wall clock for `cpn run`.
"""
