"""Snakemake's job scheduler without its idle rounds and quadratic checks, in the workflow's main process.

Snakemake 9's scheduler (snakemake.scheduling.job_scheduler.JobScheduler) ends every round by
arming a timer for its job-rate limit (--max-jobs-per-timespan, 100/1s by default), whether the
limit was reached or not, and the timer starts another round, which arms another: each job that
ends adds a chain that never stops, so after n jobs it runs about n rounds a second. And a round
stats every input of every ready job before it asks whether a core is free. A sweep keeps
thousands of jobs ready, and the main process's share of the cores grows with the run
(docs/performance.md, "Snakemake's idle rounds"). without_idle_rounds changes three things:

- at most one re-evaluation timer is pending (the rate limit is still re-checked after its timespan);
- a round with no free core selects nothing without looking (a job's end starts a round anyway);
- a round stats only the inputs whose size it does not know yet: a ready job's inputs are finished
  files, and their sizes only weigh jobs of equal priority.

Before a job runs, Snakemake asks of each of its inputs whether a dependency makes it a pipe or a
service (Job.is_pipe_or_service_input), looking through every dependency's files: inputs times
dependencies for the end of run's jobs, which read every cell's files. without_quadratic_input_check
answers from the job's pipe and service inputs, collected in one pass over its dependencies.

Each is applied only while Snakemake still has the methods it replaces. And in a SLURM group job's
own Snakemake, the group's cells run side by side on the CPUs the group asked for, where the SLURM
plugin would run them one at a time (group_steps_side_by_side).
"""

from __future__ import annotations

import asyncio
import os
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
    replaced = ("_schedule_reevalutation", "job_selector", "update_input_sizes")
    if not all(hasattr(JobScheduler, name) for name in replaced):
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

    async def update_input_sizes(self, jobs) -> None:
        async def get_size(path):
            return path, await path.size() if await path.exists() else None

        paths = {path for job in jobs for path in job.input}
        unknown = [path for path in paths if self._input_sizes.get(path) is None]
        if unknown:
            self._input_sizes.update(await asyncio.gather(*[get_size(path) for path in unknown]))
        if len(self._input_sizes) > 10000:  # as Snakemake bounds it: the sizes of the jobs at hand
            for path in [path for path in self._input_sizes if path not in paths]:
                del self._input_sizes[path]

    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    JobScheduler.job_selector = job_selector
    JobScheduler.update_input_sizes = update_input_sizes
    JobScheduler._ethosweep_without_idle_rounds = True
    return True


def group_steps_side_by_side(workflow, argv: list[str]) -> int:
    """In a SLURM group job's own Snakemake (its batch step), run the group's jobs side by side on
    the CPUs the group was given; returns how many may run at once (0: not such a process).

    The SLURM executor plugin (2.6-2.7) starts that Snakemake with `--jobs 1`, and its job-step
    executor (0.6) waits in `run_job` for each step's `srun` to end, so a group of 8 cells that
    asked SLURM for `--cores` CPUs ran its cells one after another on one of them
    (snakemake-executor-plugin-slurm issue #469, open). Lifted here: as many jobs at once as the
    group has CPUs (each cell's rule has one thread; with remote nodes set Snakemake does not count
    cores), each step's `srun` waited for in a thread of its own. The steps' `srun` asks for one
    CPU and, its SLURM_* environment cleared by the plugin, no memory of its own, so steps fit side
    by side even where the cluster counts memory."""
    from ethosweep.runtime.worker import cluster_job, target_jobs

    jobs = len(target_jobs(argv))
    if not cluster_job() or os.environ.get("SLURM_STEP_ID") is not None or jobs < 2:
        return 0
    executor = argv[argv.index("--executor") + 1] if "--executor" in argv[:-1] else None
    if executor != "slurm-jobstep":
        return 0
    at_once = min(jobs, _allocated_cpus())
    if at_once <= (workflow.global_resources["_nodes"].value or 1) or not _steps_without_waiting():
        return 0
    workflow.global_resources["_nodes"] = at_once
    return at_once


def _steps_without_waiting() -> bool:
    """The job-step executor's `run_job` (start a step's `srun`, wait for it, report) in a thread
    per job, so the scheduler can start the next; False where the plugin is not installed."""
    try:
        from snakemake_executor_plugin_slurm_jobstep import Executor
        from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
    except ImportError:
        return False
    if getattr(Executor, "_ethosweep_steps_side_by_side", False):
        return True
    run_and_wait = Executor.run_job

    def run_job(self, job) -> None:
        def run() -> None:
            try:
                run_and_wait(self, job)
            except Exception:  # reported as the job's failure, never a thread that dies silently
                self.report_job_error(SubmittedJobInfo(job))

        threading.Thread(target=run, name=f"step-{job.jobid}", daemon=True).start()

    Executor.run_job = run_job
    Executor._ethosweep_steps_side_by_side = True
    return True


def _allocated_cpus() -> int:
    """The CPUs SLURM gave this job on its node (the group's `--cpus-per-task`)."""
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def set_priorities(dag, jobs, priorities) -> bool:
    """Give the planned `jobs` these priorities (ethosweep.runtime.estimate.chain_first) before the
    scheduler starts: Snakemake takes a rule's priority as a number or a function of the job's
    wildcards, where a job's chain is a property of the whole DAG. False (and nothing changed) where
    this Snakemake's DAG keeps its jobs' priorities otherwise."""
    table = getattr(dag, "_priority", None)
    if not isinstance(table, dict) or not all(job in table for job in jobs):
        return False
    table.update(zip(jobs, priorities))
    return True


def without_quadratic_input_check() -> bool:
    """Patch Job.is_pipe_or_service_input for this process; False (and nothing changed) where this
    Snakemake's Job does not have it. The same answer: a path is such an input where the dependency
    that makes it lists it among its pipe or service outputs."""
    try:
        from snakemake.jobs import Job
    except ImportError:
        return False
    if getattr(Job, "_ethosweep_piped_inputs", False):
        return True
    if not hasattr(Job, "is_pipe_or_service_input"):
        return False
    piped_of: dict = {}  # job -> (its dependencies, how many, their pipe or service files it reads)

    def is_pipe_or_service_input(self, path) -> bool:
        dependencies = self.dag.dependencies[self]
        known = piped_of.get(self)
        if known is None or known[0] is not dependencies or known[1] != len(dependencies):
            piped = {f for dep, files in dependencies.items() for f in files if f in dep.pipe_or_service_output}
            known = piped_of[self] = (dependencies, len(dependencies), piped)
        return path in known[2]

    Job.is_pipe_or_service_input = is_pipe_or_service_input
    Job._ethosweep_piped_inputs = True
    return True
