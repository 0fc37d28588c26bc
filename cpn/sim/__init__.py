"""Simulated clusters: a deterministic executor behind the ClusterGateway port, and its ground truth.

`gateway` holds the event-driven SimulatedGateway; `truth` the rate / failure oracle over the
measured throughput tables, built from `scaling` (GPU counts beyond the table), `colocation` (jobs
sharing a card) and `memory` (the documented GPU memory model).
"""
