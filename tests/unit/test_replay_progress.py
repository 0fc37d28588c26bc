"""`cpn bench policies` reports each replay's progress (cpn.perf.progress): jobs finished out of the trace's,
the time spent and the time left at that pace, in place on a terminal and a line every few seconds
elsewhere. Time is a fake clock here: nothing depends on how fast the machine is."""

from __future__ import annotations

import pytest

from cpn.perf.policies import bench_policies
from cpn.perf.progress import LOG_EVERY_S, TTY_EVERY_S, ReplayProgress, progress_line, seconds_left
from tests.unit.test_policy_perf import EXAMPLE


def test_time_left_is_the_rest_at_the_pace_so_far():
    assert seconds_left(0, 400, 10.0) is None, "no pace before the first job finished"
    assert seconds_left(100, 400, 10.0) == pytest.approx(30.0)
    assert seconds_left(400, 400, 12.0) == 0.0
    assert seconds_left(5, 3, 1.0) == 0.0, "never negative"


def test_the_line_says_what_finished_the_time_spent_and_left():
    assert progress_line("greedy", 1234, 15264, 12.0) == (
        "greedy: 1,234/15,264 jobs finished (8.1%), 12 s spent, about 2.3 min left"
    )
    assert progress_line("sjf", 0, 50, 3.0) == (
        "sjf: 0/50 jobs finished (0.0%), 3 s spent, time left unknown until a job finishes"
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_the_line_is_rewritten_in_place_and_cleared_at_the_end():
    clock, out, asked = FakeClock(), [], []

    def finished() -> int:
        asked.append(clock.now)
        return 10

    watch = ReplayProgress("fifo", 40, out.append, tty=True, clock=clock)
    watch.tick(finished)
    assert out == [] and asked == [], "nothing due yet: the count is not even asked"
    clock.now += TTY_EVERY_S
    watch.tick(finished)
    assert out == ["\rfifo: 10/40 jobs finished (25.0%), 0 s spent, about 2 s left\x1b[K"]
    watch.tick(finished)
    assert len(out) == 1 and len(asked) == 1
    watch.close()
    assert out[-1] == "\r\x1b[K"


def test_elsewhere_a_line_every_few_seconds_and_nothing_to_clear():
    clock, out = FakeClock(), []
    watch = ReplayProgress("greedy", 100, out.append, tty=False, clock=clock)
    for done in (0, 20, 50):
        clock.now += LOG_EVERY_S
        watch.tick(lambda done=done: done)
    watch.close()
    assert out == [
        "greedy: 0/100 jobs finished (0.0%), 5 s spent, time left unknown until a job finishes\n",
        "greedy: 20/100 jobs finished (20.0%), 10 s spent, about 40 s left\n",
        "greedy: 50/100 jobs finished (50.0%), 15 s spent, about 15 s left\n",
    ]


def test_the_benchmark_reports_each_replay_s_progress_and_where_its_time_went():
    out: list[str] = []
    clock = FakeClock()

    def watch_for(name: str, total: int) -> ReplayProgress:
        def write(text: str) -> None:
            out.append(text)

        def ticking() -> float:  # each round takes a minute of the fake clock: every round reports
            clock.now += 60.0
            return clock.now

        return ReplayProgress(name, total, write, tty=False, clock=ticking)

    result = bench_policies(
        **EXAMPLE, policies=["fifo", "greedy"], progress=lambda _: None, watch_for=watch_for
    )
    for name in ("fifo", "greedy"):
        lines = [line for line in out if line.startswith(f"{name}: ")]
        assert lines and all("/3 jobs finished" in line for line in lines)
        done = [int(line.split("/")[0].split()[-1]) for line in lines]
        assert done == sorted(done) and done[-1] <= 3
    for run in result.runs:  # where each replay's time went, by stage of its rounds
        stages = run.summary["stage_wall"]
        assert {"collect", "cancel", "snapshot", "decide", "assign", "submit"} <= set(stages)
        assert sum(stages.values()) <= run.summary["sim_wall_s"] and run.summary["sim_cpu_s"] > 0
