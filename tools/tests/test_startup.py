import io
from pathlib import Path

from sglnode.readiness.startup import STAGE_TO_OOM_PHASE, ProgressDisplay, ProgressTracker, Stage

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _feed(tracker: ProgressTracker, lines: list[str]) -> None:
    for number, line in enumerate(lines, start=1):
        tracker.feed(100.0 + number, number, line)


def test_full_startup_reaches_ready_through_every_stage_in_order():
    tracker = ProgressTracker(started_at=100.0)
    _feed(tracker, (LOGS / "startup_ready_tp2.log").read_text().splitlines())
    assert tracker.ready
    stages = [milestone.stage for milestone in tracker.milestones]
    assert stages == sorted(stages)
    assert {Stage.WEIGHTS, Stage.KV_CACHE, Stage.CUDA_GRAPH, Stage.SERVING, Stage.READY} <= set(stages)


def test_elapsed_time_is_measured_from_the_start():
    tracker = ProgressTracker(started_at=100.0)
    milestone = tracker.feed(112.5, 7, "[2026-11-29 09:00:06 TP0] Load weight begin. avail mem=93.61 GB")
    assert milestone is not None
    assert milestone.elapsed_s == 12.5
    assert milestone.line_no == 7
    assert milestone.rank == 0


def test_ranks_keep_their_own_stage():
    tracker = ProgressTracker(started_at=0.0)
    _feed(
        tracker,
        [
            "[2026-11-29 09:00:06 TP0] Load weight begin. avail mem=93.61 GB",
            "[2026-11-29 09:00:06 TP3] Load weight begin. avail mem=93.61 GB",
            "[2026-11-29 09:00:14 TP0] Load weight end. elapsed=8.01 s, type=X, "
            "avail mem=62.08 GB, mem usage=31.53 GB.",
        ],
    )
    assert tracker.stage is Stage.KV_CACHE
    assert tracker.stage_of(0) is Stage.KV_CACHE
    assert tracker.stage_of(3) is Stage.WEIGHTS
    assert tracker.stage_of(None) is Stage.KV_CACHE


def test_unrelated_lines_are_not_milestones():
    tracker = ProgressTracker(started_at=0.0)
    assert tracker.feed(1.0, 1, "[2026-11-29 09:00:00] server_args=ServerArgs(...)") is None
    assert tracker.stage is Stage.STARTING


def test_every_stage_maps_to_an_oom_phase():
    assert set(STAGE_TO_OOM_PHASE) == set(Stage)
    assert STAGE_TO_OOM_PHASE[Stage.CUDA_GRAPH] == "cuda_graph"
    assert STAGE_TO_OOM_PHASE[Stage.SERVING] == "runtime"


def _milestones(lines: list[str]):
    tracker = ProgressTracker(started_at=0.0)
    _feed(tracker, lines)
    return tracker.milestones


TWO_RANKS = [
    "[2026-11-29 09:00:06 TP0] Load weight begin. avail mem=93.61 GB",
    "[2026-11-29 09:00:06 TP1] Load weight begin. avail mem=93.61 GB",
    "[2026-11-29 09:00:22] The server is fired up and ready to roll!",
]


def test_plain_display_prints_one_line_per_stage_not_per_rank():
    stream = io.StringIO()
    display = ProgressDisplay(stream, live=False)
    for milestone in _milestones(TWO_RANKS):
        display.show(milestone)
    display.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "weights" in lines[0]
    assert "ready" in lines[1]
    assert "\r" not in stream.getvalue()


def test_live_display_rewrites_one_line_and_ends_it_on_close():
    stream = io.StringIO()
    display = ProgressDisplay(stream, live=True)
    for milestone in _milestones(TWO_RANKS):
        display.show(milestone)
    display.close()
    text = stream.getvalue()
    assert text.count("\r\x1b[2K") == 2
    assert text.endswith("\n")
    assert text.count("\n") == 1


def test_display_defaults_to_live_only_on_a_terminal():
    assert ProgressDisplay(io.StringIO()).live is False
