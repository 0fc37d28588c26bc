"""`cpn bench policies` on the documented example files, figures worked out by hand."""

from __future__ import annotations

import json

import pytest

from cli import main
from config.settings import REPO_ROOT
from cpn.perf.policies import bench_policies, peer_figures
from cpn.perf.policies_report import format_table, to_json

EXAMPLE = {
    "clusters_path": str(REPO_ROOT / "examples/clusters/two-sites.yaml"),
    "throughputs_path": str(REPO_ROOT / "examples/throughputs/small.csv"),
    "trace_path": str(REPO_ROOT / "examples/traces/small.csv"),
}
METRICS = (
    "jobs succeeded failed oom unfinished makespan_s mean_jct_s p50_jct_s p99_jct_s mean_wait_s p99_wait_s "
    "p99_wait_s_large p99_wait_s_small gpu_utilization transfer_s_total sim_wall_s"
).split()


def test_example_trace_matches_the_hand_computed_schedule():
    # j1 (V100, 3,600 s) runs where its data is; j2's data is in site-b, but 2 V100s finish it in 3,600 s
    # after a 200 s copy ((20 + 5) GB x 8 / 1 Gbit/s) against 15,000 s on K80s; j3 arrives at 600 s and
    # takes the last V100 for 3,600 s. JCTs 3,600, 3,800, 3,600; makespan 4,200 s.
    result = bench_policies(**EXAMPLE, policies=["fifo", "greedy"], progress=lambda _: None)
    assert result.lower_bound.longest_job_s == pytest.approx(4200.0)
    assert result.lower_bound.work_over_capacity_s == pytest.approx(14400.0 / 8)
    for run in result.runs:
        assert run.summary["mean_jct_s"] == pytest.approx((3600 + 3800 + 3600) / 3)
        assert run.summary["transfer_s_total"] == pytest.approx(200.0)
        assert run.summary["makespan_s"] == pytest.approx(4200.0)


def test_json_has_every_metric_per_policy_and_the_lower_bound():
    result = bench_policies(
        **EXAMPLE, policies=["fifo-naive", "fifo", "sjf", "greedy"], progress=lambda _: None
    )
    out = to_json(result)
    assert out["lower_bound_makespan_s"] == pytest.approx(4200.0)
    assert set(out["policies"]) == {"fifo-naive", "fifo", "sjf", "greedy"}
    for metrics in out["policies"].values():
        assert set(METRICS) <= set(metrics)


def test_peer_figures_are_found_by_trace_name():
    static = {p.policy: p for p in peer_figures("anywhere/static500_multigpu_seed0.csv")}
    assert static["fifo"].jct_h == pytest.approx(73.57) and static["fifo"].makespan_h == pytest.approx(794.5)
    steady = peer_figures("cont1500_rate2_multigpu_seed0.csv")
    assert steady and all(p.jct_jobs == (500, 999) and p.makespan_h is None for p in steady)
    assert peer_figures("examples/traces/small.csv") == []


def test_cli_writes_json_and_rejects_unknown_policy(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "policies",
        "--clusters",
        EXAMPLE["clusters_path"],
        "--throughputs",
        EXAMPLE["throughputs_path"],
        "--trace",
        EXAMPLE["trace_path"],
    ]
    assert main([*args, "--policies", "fifo", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["policies"]["fifo"]["succeeded"] == 3
    assert main([*args, "--policies", "fifo,lottery"]) == 2
    assert "lottery" in capsys.readouterr().err


# Slow (trains the predictor, then replays): outside the one-minute unit run.
@pytest.mark.integration
def test_predictor_estimates_on_gpu_types_cpn_ships_no_scores_for(tmp_path, capsys):
    """A100 and L4 clusters, the synthetic table as ground truth: the predictor needs --benchmarks."""
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        "clusters:\n"
        "  - name: east\n"
        "    node_groups:\n"
        "      - {name: a, gpu_product: NVIDIA-A100-SXM4-80GB, gpus_per_node: 4, gpu_memory_gb: 80,"
        " cpu_cores: 64}\n"
        "  - name: west\n"
        "    node_groups:\n"
        "      - {name: l, gpu_product: NVIDIA-L4, gpus_per_node: 4, gpu_memory_gb: 24, cpu_cores: 64}\n"
        "wan_gbps: {east: {west: 10}}\n"
    )
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,arrival_s,model,batch_size,num_gpus,total_steps\n"
        "j1,0,ResNet-50,64,1,14400\nj2,0,BERT-base,32,2,27000\nj3,60,PPO,,1,5000\n"
    )
    example = REPO_ROOT / "examples" / "predictor"
    args = ["bench", "policies", "--clusters", str(clusters), "--trace", str(trace), "--policies", "greedy"]
    args += ["--throughputs", str(example / "synthetic.csv"), "--estimates", "predictor"]
    assert main(args) == 2
    assert "unknown GPU type" in capsys.readouterr().err
    out = tmp_path / "out.json"
    benchmarks = str(example / "synthetic-benchmarks.yaml")
    assert main([*args, "--benchmarks", benchmarks, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["policies"]["greedy"]["succeeded"] == 3


def test_a_table_that_times_no_job_reports_instead_of_dividing_by_zero(tmp_path):
    table = tmp_path / "other.csv"
    table.write_text("model,batch_size,gpu_product,num_gpus,steps_per_sec\nVGG-16,32,v100,1,2.0\n")
    paths = {**EXAMPLE, "throughputs_path": str(table)}
    result = bench_policies(**paths, policies=["fifo", "greedy", "milp"], progress=lambda _: None)
    lb = result.lower_bound
    assert (lb.makespan_s, lb.jobs_covered, lb.jobs_total) == (0.0, 0, 3)
    text = format_table(result)
    assert "over the 0 of 3 jobs the throughput table times" in text
    out = to_json(result)
    for name in ("fifo", "greedy", "milp"):
        metrics = out["policies"][name]
        assert metrics["makespan_over_lower_bound"] is None
        assert (
            metrics["succeeded"]
            + metrics["failed"]
            + metrics["rejected"]
            + metrics["stuck"]
            + metrics["unfinished"]
            == 3
        )
    assert out["policies"]["greedy"]["outcomes"]["rejected"] == {"no runtime estimate for any GPU type": 3}
    assert out["policies"]["milp"]["outcomes"]["rejected"] == {"no runtime estimate for any GPU type": 3}


def test_set_gives_each_policy_the_settings_it_has_and_names_unknown_keys():
    result = bench_policies(
        **EXAMPLE,
        policies=["greedy", "milp"],
        progress=lambda _: None,
        overrides={"objective": "makespan", "solver": "cbc", "cpu_threshold": "0.9"},
    )
    names = [run.name for run in result.runs]
    assert names == ["greedy", "milp(solver=cbc,objective=makespan)"]
    milp = to_json(result)["policies"]["milp(solver=cbc,objective=makespan)"]
    assert milp["settings"]["solver"] == "cbc" and milp["solver"] == "cbc" and milp["solver_rounds"] > 0
    assert milp["predicted_start_jobs"] >= 0
    with pytest.raises(ValueError, match="--set colour: no listed policy has such a setting"):
        bench_policies(**EXAMPLE, policies=["greedy"], progress=lambda _: None, overrides={"colour": "red"})
    with pytest.raises(ValueError, match="policy milp: time_limit_s"):
        bench_policies(
            **EXAMPLE, policies=["milp"], progress=lambda _: None, overrides={"time_limit_s": "-1"}
        )


def test_cpn_bench_solver_writes_the_round_times(tmp_path):
    out = tmp_path / "solver.json"
    assert main(["bench", "solver", "--jobs", "30", "--gpus", "16", "--rounds", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert {k: figures[k] for k in ("jobs", "gpus", "rounds", "fallbacks")} == {
        "jobs": 30,
        "gpus": 16,
        "rounds": 3,
        "fallbacks": 0,
    }
    assert 0 < figures["median_s"] <= figures["max_s"]
