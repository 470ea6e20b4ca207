# What a run says: its first lines (the matrix, the jobs, about how long, the memory bound), its
# end (the summary table) and what stopped it; called from the Snakefile's onstart, onsuccess and
# onerror. Included after common.smk, whose helpers it uses.


# The rules that describe the whole run: only they write the summary, the operator map and the
# report, from every cell's recorded outcome (ethosweep.runtime.outcome).
END_OF_RUN = ("summarize_sweep", "summarize_cpu", "map_operators", "report_cells", "report_plots", "report_index")


def say_what_the_run_will_do():
    """The run's first line: the matrix, the jobs to run and about how long they take on this machine
    (ethosweep.runtime.estimate), from the DAG Snakemake built."""
    dag = workflow.dag
    jobs = list(dag.needrun_jobs())
    index = {job: i for i, job in enumerate(jobs)}
    planned = [
        ethosweep_estimate.Job(
            stage=job.rule.name,
            log=str(job.log[0]) if job.log else None,
            priority=job.priority,
            threads=job.threads,
            needs=[index[d] for d in dag.dependencies[job] if d in index],
            key=known_cost_key(dict(job.wildcards.items())),
        )
        for job in jobs
    ]
    measured = ethosweep_estimate.measured_by_rule(
        [(job.rule.name, str(job.log[0]) if job.log else None) for job in dag.jobs]
    )
    cores = min(workflow.cores or 1, os.cpu_count() or 1)
    about = ethosweep_estimate.estimate(planned, cores, measured, KNOWN_COSTS)
    if ethosweep_estimate.plan_written(planned, about.costs, PRIORITY["export"]):  # perf/order.py
        raise SystemExit(0)
    # the jobs on chains that would otherwise bound the run start first (ethosweep.runtime.estimate)
    priorities, seconds = ethosweep_estimate.chain_first(
        planned, list(about.costs), cores, "compile_with_vela", first=PRIORITY["export"]
    )
    if ethosweep_scheduling.set_priorities(dag, jobs, priorities):
        about = dataclasses.replace(about, seconds=seconds)
    print(f"{SWEEP.describe()}; {len(jobs):,} jobs to run, {about.said()}", file=sys.stderr)
    tell_the_progress_line({job.jobid: cost for job, cost in zip(jobs, about.costs)})
    bound_memory([int(job.resources.get("mem_mb", 0) or 0) for job in jobs], cores)


def tell_the_progress_line(seconds_by_job):
    """Each job's expected seconds, for the time left on the progress line, where ethosweep's logger
    (src/snakemake_logger_plugin_ethosweep, the default profile's) is in use."""
    logger = sys.modules.get("snakemake_logger_plugin_ethosweep")
    if logger is not None:
        logger.expect(seconds_by_job)


def bound_memory(job_mb, cores):
    """A local run without a memory total (`--resources mem_mb=N`) gets what the machine has
    available, so the rules' declared needs bound how many jobs run at once (ethosweep.runtime.memory)."""
    scheduler = workflow.scheduler
    available = ethosweep_memory.available_mb()
    if not workflow.local_exec or available is None or any(k.startswith("mem") for k in scheduler.global_resources):
        return
    limit = ethosweep_memory.local_limit_mb(available, max(job_mb, default=0))
    scheduler.global_resources["mem_mb"] = scheduler.resources["mem_mb"] = limit
    said = ethosweep_memory.holding_back(limit, cores, job_mb)
    if said:
        print(f"ethosweep: {said}", file=sys.stderr)


def forget_end_of_run():
    """At the start of a run that will remake the summary and report: remove the earlier run's
    now (Snakemake removes a job's old outputs only when the job starts), so that a run stopped
    by a failure that may not recur leaves none that describes another matrix."""
    for job in workflow.dag.needrun_jobs():
        if job.rule.name in END_OF_RUN:
            for path in map(Path, job.output):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)


def say_what_stopped_the_run():
    """A job failed for a reason of the machine's (recorded failures do not stop a run:
    ethosweep.runtime.errors)."""
    print(
        "\nethosweep: the run stopped before its summary and report: a job above FAILED for a reason of the "
        "machine's that may not recur (memory, disk, a time limit, an interruption, the registry unreachable, a "
        "damaged file, a missing tool). Run the same command again to retry it, after installing what it names if "
        "a tool was missing; every finished job is kept.",
        file=sys.stderr,
    )


def print_summary_table():
    if Path(SUMMARY).exists():
        rows = read_summary_csv(SUMMARY)
        table = ethosweep_terminal.format_table(rows)
        print(f"\n{table}\n\nFull table: {SUMMARY}\nReport: results/report/index.html", file=sys.stderr)
    cpu_lines = format_cpu_lines(CPU_SUMMARY) if SWEEP.cpu_cells else ""
    if cpu_lines:
        print(f"\n{cpu_lines}\nFull table: {CPU_SUMMARY}", file=sys.stderr)
