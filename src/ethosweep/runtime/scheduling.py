"""Snakemake's job scheduler without its idle rounds, in the workflow's main process.

Snakemake 9's scheduler (snakemake.scheduling.job_scheduler.JobScheduler) ends every round by
arming a timer for its job-rate limit (--max-jobs-per-timespan, 100/1s by default), whether the
limit was reached or not, and the timer starts another round, which arms another: each job that
ends adds a chain that never stops, so after n jobs it runs about n rounds a second. And a round
stats every input of every ready job before it asks whether a core is free. A sweep keeps
thousands of Vela jobs ready behind its lowerings, and the main process's share of the cores grows
with the run (measured: docs/performance.md, "Snakemake's idle rounds"). Two changes undo it:

- at most one re-evaluation timer is pending (the rate limit is still re-checked after its timespan);
- a round with no free core selects nothing without looking (a job's end starts a round anyway).

Applied only while Snakemake's scheduler still has the two methods it replaces.
"""

from __future__ import annotations

import threading


def without_idle_rounds() -> bool:
    """Patch the scheduler class for this process; False (and nothing changed) where this
    Snakemake's scheduler is not the one described above."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    if getattr(JobScheduler, "_ethosweep_without_idle_rounds", False):
        return True
    if not all(hasattr(JobScheduler, name) for name in ("_schedule_reevalutation", "job_selector")):
        return False
    select = JobScheduler.job_selector

    def _schedule_reevalutation(self, delay) -> None:
        pending = getattr(self, "_ethosweep_reevaluation", None)
        if pending is not None and pending.is_alive():
            return
        timer = threading.Timer(delay, self._open_jobs.release)
        timer.daemon = True  # a pending re-check never holds the process open at its end
        self._ethosweep_reevaluation = timer
        timer.start()

    def job_selector(self, jobs):
        if self.resources.get("_cores", 1) == 0:
            return []
        return select(self, jobs)

    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    JobScheduler.job_selector = job_selector
    JobScheduler._ethosweep_without_idle_rounds = True
    return True
