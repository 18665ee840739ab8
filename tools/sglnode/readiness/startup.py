"""Startup progress read from SGLang's own log lines, with elapsed times.

Stages, in order: starting -> weights -> kv_cache -> cuda_graph -> serving -> ready. The stage a
crash happened in is what names an OOM's phase, so the tracker keeps one stage per TP rank as
well as the furthest stage any rank reached.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TextIO

from sglnode.readiness import loglines


class Stage(IntEnum):
    """Where a server is in its startup; the order is the order SGLang goes through them."""

    STARTING = 0
    WEIGHTS = 1
    KV_CACHE = 2
    CUDA_GRAPH = 3
    SERVING = 4
    READY = 5

    @property
    def label(self) -> str:
        return self.name.lower()


# The OOM phase that a crash in each stage implies. Before "Load weight begin" the only large
# allocations are the weights' (model construction), so STARTING maps to weights as well.
STAGE_TO_OOM_PHASE: dict[Stage, str] = {
    Stage.STARTING: "weights",
    Stage.WEIGHTS: "weights",
    Stage.KV_CACHE: "kv_cache",
    Stage.CUDA_GRAPH: "cuda_graph",
    Stage.SERVING: "runtime",
    Stage.READY: "runtime",
}

# (regex, stage entered, short description) in startup order. "Load weight end" moves to
# KV_CACHE: the next allocation after the weights is the KV pool.
_MILESTONES: tuple[tuple[re.Pattern[str], Stage, str], ...] = (
    (loglines.LOAD_WEIGHT_BEGIN_RE, Stage.WEIGHTS, "loading weights"),
    (loglines.LOAD_WEIGHT_END_RE, Stage.KV_CACHE, "weights loaded, allocating KV cache"),
    (loglines.DSV4_MEMORY_CALCULATION_RE, Stage.KV_CACHE, "sizing DeepSeek-V4 compressed KV pools"),
    (loglines.DSV4_POOL_SIZES_RE, Stage.KV_CACHE, "DeepSeek-V4 KV pools sized"),
    (loglines.KV_CACHE_ALLOCATED_RE, Stage.KV_CACHE, "KV cache allocated"),
    (loglines.MEMORY_POOL_END_RE, Stage.KV_CACHE, "memory pools allocated"),
    (loglines.CUDA_GRAPH_BEGIN_RE, Stage.CUDA_GRAPH, "capturing CUDA graphs"),
    (loglines.CUDA_GRAPH_END_RE, Stage.SERVING, "CUDA graphs captured"),
    (loglines.MAX_TOTAL_NUM_TOKENS_RE, Stage.SERVING, "memory pools sized"),
    (loglines.UVICORN_RUNNING_RE, Stage.SERVING, "HTTP server listening, warming up"),
    (loglines.SERVER_READY_RE, Stage.READY, "ready"),
)


@dataclass(frozen=True)
class Milestone:
    """A progress line that was recognised."""

    stage: Stage
    description: str
    elapsed_s: float
    line_no: int
    text: str
    rank: int | None


@dataclass
class ProgressTracker:
    """Feeds on log lines; knows the furthest stage and each rank's stage."""

    started_at: float
    stage: Stage = Stage.STARTING
    rank_stages: dict[int, Stage] = field(default_factory=dict)
    milestones: list[Milestone] = field(default_factory=list)

    def feed(self, timestamp: float, line_no: int, line: str) -> Milestone | None:
        """Record the line if it is a startup milestone; return it when it is one."""
        for regex, stage, description in _MILESTONES:
            if regex.search(line):
                rank = loglines.tp_rank(line)
                if rank is not None:
                    self.rank_stages[rank] = max(self.rank_stages.get(rank, Stage.STARTING), stage)
                self.stage = max(self.stage, stage)
                milestone = Milestone(
                    stage=stage,
                    description=description,
                    elapsed_s=max(0.0, timestamp - self.started_at),
                    line_no=line_no,
                    text=line,
                    rank=rank,
                )
                self.milestones.append(milestone)
                return milestone
        return None

    def restart(self) -> None:
        """A new server process: stages start over; the milestones seen so far stay on record."""
        self.stage = Stage.STARTING
        self.rank_stages.clear()

    def stage_of(self, rank: int | None) -> Stage:
        """The stage of one rank (the furthest stage overall when the rank is unknown)."""
        if rank is None:
            return self.stage
        return self.rank_stages.get(rank, self.stage)

    @property
    def ready(self) -> bool:
        return self.stage is Stage.READY


class ProgressDisplay:
    """Shows milestones: one rewritten status line on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._last_stage: Stage | None = None
        self._line_open = False

    def show(self, milestone: Milestone) -> None:
        # Multi-rank logs repeat each milestone once per rank; show a stage's first line only.
        if milestone.stage == self._last_stage and milestone.stage is not Stage.READY:
            return
        self._last_stage = milestone.stage
        text = f"[{milestone.elapsed_s:7.1f}s] {milestone.stage.label:<10} {milestone.description}"
        if self.live:
            self.stream.write("\r\x1b[2K" + text)
            self._line_open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A status line that is not a milestone (e.g. "connection refused at URL"), on its own line."""
        if self._line_open:
            self.stream.write("\n")
            self._line_open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the live line so whatever is printed next starts on its own line."""
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False
