"""A job's output as the executor reads it: its containers' log and metric lines.

``logs`` and ``points`` read the rank-0 container (where ``flowcon.elastic`` reports),
``switch_gap`` a stop-free event's no-progress pause from every container's step lines, and
``job_logs`` every worker's lines in time order (the API's and the CLI's job logs), and
``completion`` whether workers that exited 0 finished the job (flowcon/core/completion.py).
"""

from __future__ import annotations

from flowcon.core.completion import Completion, done_marker, judge, unreadable
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import ExecutorError, LogLine, Worker
from flowcon.executor.executor_base import ExecutorBase
from flowcon.executor.profiling import line_points, worker_points
from flowcon.jobspec.keys import MetricSpec


class JobLogsMixin(ExecutorBase):
    """The ``Executor``'s reading of job output."""

    def logs(self, job: str) -> list[str]:
        """Output lines of the job's rank-0 container (where flowcon.elastic reports)."""
        ws = self.backend.list_workers(self._selector(job))
        ws.sort(key=lambda w: w.node_rank)
        return self.backend.logs(ws[0]) if ws else []

    def points(self, job: str, metric: MetricSpec | None = None) -> list[tuple[float, float]]:
        """(step, ts) of the metric lines of the job's rank-0 container, read in the job's
        own format when its spec has ``metric.regex`` (``profiling.worker_points``)."""
        ws = self.backend.list_workers(self._selector(job))
        ws.sort(key=lambda w: w.node_rank)
        return worker_points(self.backend, ws[0], metric) if ws else []

    def completion(
        self,
        job: str,
        iterations: float,
        metric: MetricSpec | None = None,
        reported_before: float | None = None,
    ) -> Completion:
        """Whether the job's workers, which all exited 0, finished it: its rank-0 output's
        completion marker or progress (flowcon/core/completion.py); ``reported_before``:
        the step the job was last seen to report (None: never)."""
        ws = sorted(self.backend.list_workers(self._selector(job)), key=lambda w: w.node_rank)
        if not ws:
            return unreadable("no worker left to read")
        try:
            lines = self.backend.read_logs(ws[0])
        except ExecutorError as exc:
            return unreadable(str(exc))
        last = max((step for step, _ in line_points(lines, metric)), default=None)
        return judge(done_marker(ln.text for ln in lines), last, iterations, reported_before)

    def switch_gap(self, job: str, began: float, world: int) -> float | None:
        """The no-progress gap of a stop-free event begun at ``began`` (wall time) to
        world size ``world``, from the metric lines of the job's containers (rank 0 reports;
        it is the store host's worker until that one leaves) in time order
        (``stopfree.switch_gap``); None until the job reports a step at that size."""
        lines = {
            (ln.step, ln.ts): ln
            for w in self.backend.list_workers(self._selector(job))
            for ln in stopfree.step_lines(self.backend.logs(w))
        }
        ordered = sorted(lines.values(), key=lambda ln: ln.ts)
        return stopfree.switch_gap(ordered, began, world)

    def job_logs(
        self, job: str, rank: int | None = None, after_ns: int = 0, tail: int | None = None
    ) -> tuple[list[int], list[tuple[Worker, LogLine]]]:
        """(the node ranks of the job's workers, their output lines newer than
        ``after_ns`` in time order); only rank ``rank``'s when given, the last ``tail``
        lines of each worker when given."""
        ws = sorted(self.backend.list_workers(self._selector(job)), key=lambda w: w.node_rank)
        ranks = [w.node_rank for w in ws]
        if rank is not None:
            ws = [w for w in ws if w.node_rank == rank]
        out = [(w, ln) for w in ws for ln in self.backend.read_logs(w, after_ns, tail)]
        out.sort(key=lambda p: (p[1].ts_ns, p[0].node_rank))
        return ranks, out
