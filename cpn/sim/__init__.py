"""Simulated clusters: a deterministic executor behind the ClusterGateway port, and its ground truth.

`gateway` holds the event-driven SimulatedGateway, `truth` the run time / failure oracle over a
measured throughput table, `memory` the documented GPU memory model.
"""
