"""About how long a run will take on this machine, from what its jobs cost when they last ran.

A job to run costs the CPU seconds its own log recorded last time (a job that ran before: after an
edit, a tool upgrade), plus Snakemake's own time per job; else what the same job of the same model
cost on this project's machine (MEASURED_COSTS: the zoo presets' models, by name and definition);
else the median of its rule's jobs measured in this folder; else the stage's mean in the default
matrix on this project's machine (STAGE_SECONDS; docs/performance.md). CPU seconds, not wall: a
job's wall time grows with what else ran beside it, its CPU time does not. The jobs are then
scheduled as Snakemake does (ready jobs by priority onto the cores, each after the jobs it needs),
which bounds the run by its longest chain as well as by its total. The same costs set a verify
job's wall-clock limit (time_limit). Torch-free: the workflow calls it while it starts.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

# Mean CPU seconds of a job of each rule in the default matrix's first run on this project's machine
# (2 cores, 28 November 2026): what a new user's first run costs. A folder's own logs replace them as
# its jobs run; the deployed zoo's jobs cost 10 to 100 times these (docs/performance.md).
STAGE_SECONDS = {
    "export_model": 1.1,
    "train_model": 6.7,
    "quantize_model": 2.8,
    "lower_to_tosa": 8.6,
    "verify_numerics": 6.7,
    "verify_fallbacks": 0.1,
    "compile_with_vela": 0.3,
    "plan_firmware": 0.1,
    "bundle_deployment": 0.1,
    "lower_cpu": 10.5,
    "summarize_sweep": 1.0,
    "map_operators": 1.0,
    "report_cells": 2.0,
    "report_plots": 5.0,
    "report_index": 1.0,
}
DEFAULT_SECONDS = 1.0
# What a job costs beyond its stage's CPU: Snakemake starting its script, the script's imports, the
# outputs' bookkeeping (a Vela job: ~0.3 s of CPU in its stage, ~0.8 s of wall on an idle core)
JOB_OVERHEAD_SECONDS = 0.5
# the job runner's line for a job that completed or whose failure was recorded (ethosweep.runtime.execute):
# a recorded failure costs what it took when it reruns, and a search for what Vela refuses is the
# costliest Vela job of a zoo (docs/performance.md)
DONE = re.compile(r"^ethosweep: (?:done|recorded) in [\d.]+ s \(CPU ([\d.]+) s", re.M)
# The CPU seconds of each job of the zoo presets' models as measured on this project's machine
# (written by perf/measured_costs.py from a run's logs): a zoo model's lowering costs minutes where
# the default matrix's costs seconds, so a new folder's estimate needs its own model's figures.
MEASURED_COSTS = Path(__file__).with_name("measured_costs.csv")
# A job's wall-clock limit over its expected wall time: the expected CPU seconds of a verify job are a
# one-sample projection, which whole jobs exceeded by up to 1.7x (docs/performance.md)
LIMIT_MARGIN = 3


@dataclass
class Job:
    """What the estimate needs of a job: its rule (`stage`), its log, its priority, its threads, and
    the jobs of the run it waits for (their indices)."""

    stage: str  # the rule's name
    log: str | None
    priority: int = 0
    threads: int = 1
    needs: list[int] = field(default_factory=list)
    # what the job is for, as MEASURED_COSTS names it: (model fingerprint, the other wildcards)
    key: tuple[str, str] | None = None


@dataclass(frozen=True)
class Estimate:
    seconds: float  # wall seconds on `cores`
    job_seconds: float  # the jobs' own seconds, summed
    jobs: int
    measured: int  # jobs whose own or rule's time was measured in this folder
    cores: int
    known: int = 0  # jobs whose time comes from MEASURED_COSTS (the same job of the same model)
    costs: tuple[float, ...] = ()  # each job's seconds, in the order of the jobs given

    def said(self) -> str:
        """'about 5 h 40 min on 2 cores (1,203 of 7,046 jobs' times measured here, the rest from the
        stages' medians on this project's machine)'"""
        rest = self.jobs - self.measured - self.known
        sources = [
            f"{self.measured:,} of {self.jobs:,} jobs' times measured here" if self.measured else "",
            f"{self.known:,} {'' if self.measured else f'of {self.jobs:,} '}as the same jobs of these models cost on "
            "this project's machine (2 cores)"
            if self.known
            else "",
            ("the rest" if self.measured or self.known else "the jobs' times")
            + " from the default matrix's stage costs on this project's machine; a folder's own as its jobs run"
            if rest
            else "",
        ]
        source = "every job's time measured here" if self.measured == self.jobs else "; ".join(s for s in sources if s)
        return f"about {duration(self.seconds)} on {self.cores} core{'s' if self.cores != 1 else ''} ({source})"


def duration(seconds: float) -> str:
    """'40 s', '12 min', '5 h 40 min'."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def recorded_seconds(log: str | None) -> float | None:
    """A job's cost when it last completed or had its failure recorded: its stage's CPU seconds (its
    log's DONE line) plus JOB_OVERHEAD_SECONDS; None for a job without such a log (never run, or
    failed for a cause a rerun retries)."""
    if not log:
        return None
    try:
        with open(log, errors="replace") as f:
            found = DONE.findall(f.read()[-4000:])
    except OSError:
        return None
    return float(found[-1]) + JOB_OVERHEAD_SECONDS if found else None


def model_fingerprint(params: dict) -> str:
    """A model's name and definition (its `model` params, ModelSpec.as_params): what MEASURED_COSTS
    is keyed by, so that another model of the same name never takes its figures. The name too: two
    models of one definition may differ in what it leaves out (a dataset, training)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def job_key(params: dict, wildcards: dict[str, str]) -> tuple[str, str]:
    """(model fingerprint, the job's other wildcards) for a job of the model `params` describes."""
    return model_fingerprint(params), "/".join(v for k, v in wildcards.items() if k != "model" and v)


class KnownCosts:
    """MEASURED_COSTS read: a job's CPU seconds by rule, model fingerprint and its other wildcards or
    their first ones (a cell's Vela job is recorded per scheme and target, over memory modes); per
    rule, model and scheme the median, for a configuration the table does not hold; and per rule and
    model the median, for a scheme it does not hold: one model's Vela jobs cost 1 to 3 times as much
    in a16w8 as in int8, while two models' differ by up to 15 times (docs/performance.md), so the
    model's other scheme says more than the rule's median over every model."""

    def __init__(self, rows: list[dict]):
        self.known: dict[tuple[str, str, str], float] = {}
        alike: dict[tuple[str, str, str], list[float]] = {}
        of_model: dict[tuple[str, str], list[float]] = {}
        for row in rows:
            seconds = float(row["cpu_seconds"])
            self.known[row["rule"], row["fingerprint"], row["wildcards"]] = seconds
            alike.setdefault((row["rule"], row["fingerprint"], row["wildcards"].split("/")[0]), []).append(seconds)
            of_model.setdefault((row["rule"], row["fingerprint"]), []).append(seconds)
        self.alike = {key: statistics.median(times) for key, times in alike.items()}
        self.of_model = {key: statistics.median(times) for key, times in of_model.items()}
        self.most = {key: max(times) for key, times in alike.items()}

    @classmethod
    def read(cls, path: Path = MEASURED_COSTS) -> KnownCosts:
        try:
            with open(path, newline="") as f:
                return cls(list(csv.DictReader(f)))
        except OSError:
            return cls([])

    def seconds(self, job: Job) -> float | None:
        if job.key is None:
            return None
        fingerprint, rest = job.key
        parts = rest.split("/")
        for known in (self.known.get((job.stage, fingerprint, "/".join(parts[:n]))) for n in range(len(parts), 0, -1)):
            if known is not None:
                return known + JOB_OVERHEAD_SECONDS
        found = self.alike.get((job.stage, fingerprint, parts[0]), self.of_model.get((job.stage, fingerprint)))
        return None if found is None else found + JOB_OVERHEAD_SECONDS

    def most_seconds(self, job: Job) -> float | None:
        """The most any job of this rule, model and scheme cost: a bound for a job that may cost
        what its sibling did (a u85 verification recorded as taken from the u55 one, 0 s, is not
        taken where the lowerings differ)."""
        if job.key is None:
            return None
        fingerprint, rest = job.key
        return self.most.get((job.stage, fingerprint, rest.split("/")[0]))


def time_limit(rule: str, known: KnownCosts, key_of, workflow):
    """An input function for a rule's `runtime` resource (minutes): wall_clock_minutes of the most a
    job of its model and scheme cost on this project's machine, the profile's default where that is
    unknown. The default matrix's jobs fit the default, but one verification of a zoo model costs
    100 min of a core, and `--cores 8` on 2 cores shares each core between 4 jobs. `key_of` gives a
    job's job_key from its wildcards; `--set-resources RULE:runtime=M` still wins."""

    def minutes(wildcards) -> float:
        floor = default_resource(workflow, "runtime")
        cost = known.most_seconds(Job(stage=rule, log=None, key=key_of(dict(wildcards.items()))))
        if floor is None or cost is None:
            return floor or 0  # 0: no limit (ethosweep.runtime.supervise)
        sharing = (workflow.cores or 1) / (os.cpu_count() or 1) if workflow.local_exec else 1
        return wall_clock_minutes(cost, sharing, floor)

    return minutes


def default_resource(workflow, name: str) -> float | None:
    """A number from `default-resources` (the profile's or `--default-resources`), else None."""
    try:
        value = workflow.resource_settings.default_resources[name].value
    except (TypeError, KeyError, AttributeError):
        return None
    return value if isinstance(value, (int, float)) else None


def wall_clock_minutes(cpu_seconds: float, jobs_per_core: float, floor_minutes: float) -> int:
    """A job's wall-clock limit: LIMIT_MARGIN times its expected wall time (its CPU seconds times
    the jobs that share its core), never below `floor_minutes` (the profile's default)."""
    return max(math.ceil(floor_minutes), math.ceil(LIMIT_MARGIN * cpu_seconds * max(1.0, jobs_per_core) / 60))


def job_costs(
    jobs: list[Job], measured_rules: dict[str, list[float]], known: KnownCosts | None = None
) -> tuple[list[float], int, int]:
    """Each job's seconds (its own record, the same job of the same model on this project's machine,
    its rule's median here, or the stage's), how many came from this folder and how many from
    MEASURED_COSTS."""
    medians = {rule: statistics.median(times) for rule, times in measured_rules.items() if times}
    known = known or KnownCosts([])
    costs, measured, from_table = [], 0, 0
    for job in jobs:
        cost = recorded_seconds(job.log)
        if cost is not None:
            measured += 1
        elif (cost := known.seconds(job)) is not None:
            from_table += 1
        elif job.stage in medians:
            measured += 1
            cost = medians[job.stage]
        else:
            cost = STAGE_SECONDS.get(job.stage, DEFAULT_SECONDS)
        costs.append(cost)
    return costs, measured, from_table


def schedule(jobs: list[Job], costs: list[float], cores: int) -> float:
    """The run's wall seconds when ready jobs start by priority (then the longest first) as cores
    free up: list scheduling, as Snakemake's greedy scheduler does."""
    return max(ends(jobs, costs, cores, [job.priority for job in jobs]), default=0.0)


def ends(jobs: list[Job], costs: list[float], cores: int, priorities: list[float]) -> list[float]:
    """When each job ends, in schedule's list scheduling with these priorities."""
    waiting = [len(job.needs) for job in jobs]
    followers = _followers(jobs)
    ready = [(-priorities[i], -costs[i], i) for i, job in enumerate(jobs) if not job.needs]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []  # (ends at, job)
    ended = [0.0] * len(jobs)
    now, free = 0.0, cores
    while ready or running:
        while ready and free >= min(jobs[ready[0][2]].threads, cores):
            _, _, index = heapq.heappop(ready)
            free -= min(jobs[index].threads, cores)
            heapq.heappush(running, (now + costs[index], index))
        now, index = heapq.heappop(running)
        ended[index] = now
        free += min(jobs[index].threads, cores)
        for follower in followers[index]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, (-priorities[follower], -costs[follower], follower))
    return ended


def _followers(jobs: list[Job]) -> list[list[int]]:
    followers: list[list[int]] = [[] for _ in jobs]
    for index, job in enumerate(jobs):
        for need in job.needs:
            followers[need].append(index)
    return followers


# ---- the order jobs start in ----------------------------------------------------------------------

# The priority of a job whose chain of work starts first (above every rule's own)
CHAIN_FIRST = 1000
# Chains longer than these shares of the run's work over its cores start first (None: none does):
# the candidate orders, each scheduled on the measured costs
CHAIN_SHARES = (None, 0.5, 0.3, 0.2, 0.1)
# a candidate order at most this much longer than the shortest counts as short as it
SAME_LENGTH = 0.01


def chains(jobs: list[Job], costs: list[float]) -> list[float]:
    """Each job's chain: the most work that must run one job after another from its start to the
    run's end, its own included (the critical-path length of list scheduling)."""
    followers = _followers(jobs)
    chain = [0.0] * len(jobs)
    for index in reversed(_in_order(jobs, followers)):
        chain[index] = costs[index] + max((chain[f] for f in followers[index]), default=0.0)
    return chain


def _in_order(jobs: list[Job], followers: list[list[int]]) -> list[int]:
    """The jobs' indices, each after the jobs it needs."""
    waiting = [len(job.needs) for job in jobs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        index = ready.pop()
        order.append(index)
        for follower in followers[index]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                ready.append(follower)
    return order


def chain_first(
    jobs: list[Job], costs: list[float], cores: int, results: str, first: float
) -> tuple[list[float], float]:
    """Priorities for the run, and its wall seconds with them. The rules' order (pipeline order, the
    cells' `results` rule before verification) gets answers out early, but where one model's chain of
    jobs is longer than the run's work over its cores it leaves that chain to the end, and the chain
    bounds the run (the deployed zoo on 8 cores: 4.2 h against 3.6 h). So the chains longer than a
    share of that work start first, longest first; of the shares in CHAIN_SHARES, the one whose run
    is shortest, and of the about as short (SAME_LENGTH), the one that ends half the `results` jobs
    soonest (docs/performance.md, "The order jobs start in"). The jobs of rule priority `first` or
    more (every model's export) stay before them: a broken model is said in a run's first seconds."""
    chain = chains(jobs, costs)
    work = sum(costs) / max(1, cores)
    above_chains = CHAIN_FIRST + max(chain, default=0.0)
    firsts = [i for i, job in enumerate(jobs) if job.stage == results]
    candidates = []
    for share in CHAIN_SHARES:
        limit = None if share is None else share * work
        priorities = [_priority(job, chain[i], limit, first, above_chains) for i, job in enumerate(jobs)]
        ended = ends(jobs, costs, max(1, cores), priorities)
        answers = statistics.median([ended[i] for i in firsts]) if firsts else 0.0
        candidates.append((max(ended, default=0.0), answers, priorities))
    shortest = min(end for end, _, _ in candidates)
    end, _, priorities = min((c for c in candidates if c[0] <= shortest * (1 + SAME_LENGTH)), key=lambda c: c[1])
    return priorities, end


# perf/order.py: where a run writes the jobs it planned and their costs, and runs none
PLAN_TO = "ETHOSWEEP_PLAN_TO"


def plan_written(jobs: list[Job], costs: list[float], first: float) -> bool:
    """With PLAN_TO set, the planned jobs, their costs and the exports' rule priority (chain_first's
    `first`) written there as JSON, for perf/order.py to schedule; False without it."""
    path = os.environ.get(PLAN_TO)
    if not path:
        return False
    planned = [{"stage": j.stage, "priority": j.priority, "needs": j.needs, "seconds": c} for j, c in zip(jobs, costs)]
    Path(path).write_text(json.dumps({"first": first, "jobs": planned}))
    return True


def _priority(job: Job, chain: float, limit: float | None, first: float, above_chains: float) -> float:
    """A job's priority when the chains longer than `limit` start first (None: the rules' order)."""
    if limit is None:
        return job.priority
    if job.priority >= first:  # every model's export, before any chain
        return job.priority + above_chains
    return job.priority if chain <= limit else max(job.priority, CHAIN_FIRST + chain)


def estimate(
    jobs: list[Job], cores: int, measured_rules: dict[str, list[float]], known: KnownCosts | None = None
) -> Estimate:
    costs, measured, from_table = job_costs(jobs, measured_rules, known)
    wall = schedule(jobs, costs, max(1, cores)) if jobs else 0.0
    return Estimate(wall, sum(costs), len(jobs), measured, max(1, cores), from_table, tuple(costs))


def measured_by_rule(logs: list[tuple[str, str | None]]) -> dict[str, list[float]]:
    """rule -> the costs recorded by the logs that have one, of (rule, log) pairs."""
    found: dict[str, list[float]] = {}
    for rule, log in logs:
        seconds = recorded_seconds(log) if log and Path(log).exists() else None
        if seconds is not None:
            found.setdefault(rule, []).append(seconds)
    return found
