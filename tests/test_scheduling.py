"""Snakemake's scheduler without its idle rounds (ethosweep.runtime.scheduling), on a real
Snakemake run: many short jobs, then a long one while sixty others wait for its core."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

SNAKEFILE = """
import threading
from snakemake.scheduling.job_scheduler import JobScheduler
{patch}
from snakemake.io import _IOFile
# what the test reads: the rounds that looked at every ready job's inputs, threads alive at most,
# and the input sizes the rounds asked for
seen = {{"selections": 0, "threads": 0, "sizes": 0}}
size = _IOFile.size
async def counted_size(self):
    seen["sizes"] += 1
    return await size(self)
_IOFile.size = counted_size
sizes, rearm = JobScheduler.update_input_sizes, JobScheduler._schedule_reevalutation
async def counted_sizes(self, jobs):
    seen["selections"] += 1
    return await sizes(self, jobs)
def counted_rearm(self, delay):
    rearm(self, delay)
    seen["threads"] = max(seen["threads"], threading.active_count())
JobScheduler.update_input_sizes, JobScheduler._schedule_reevalutation = counted_sizes, counted_rearm

rule all:
    input: expand("waiting/{{i}}", i=range(60)), "long"
rule short:
    output: "short/{{i}}"
    shell: "touch {{output}}"
rule long:
    input: expand("short/{{i}}", i=range(60))
    output: "long"
    priority: 100
    shell: "sleep 5; touch {{output}}"
rule waiting:
    input: "short/{{i}}", "short/0"
    output: "waiting/{{i}}"
    shell: "touch {{output}}"
onsuccess:
    print(f"selections {{seen['selections']}} threads {{seen['threads']}} sizes {{seen['sizes']}}")
"""


def rounds(tmp_path, patched: bool) -> tuple[int, int, int]:
    """(rounds that selected jobs, threads alive at most, input sizes asked) of the toy workflow on one core."""
    patch = f"sys.path.insert(0, {str(REPO / 'src')!r})\nfrom ethosweep.runtime.scheduling import without_idle_rounds\n"
    patch += "assert without_idle_rounds()" if patched else ""
    folder = tmp_path / ("patched" if patched else "as-is")
    folder.mkdir()
    (folder / "Snakefile").write_text(SNAKEFILE.format(patch=patch))
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--scheduler", "greedy", "--quiet", "all"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    selections, threads, sizes = (int(n) for n in done.stdout.split("selections ")[1].split()[::2])
    return selections, threads, sizes


def test_a_run_with_jobs_waiting_for_a_core_does_not_poll_them(tmp_path):
    # as Snakemake is: while the long job runs, every ended job's timer chain starts a round a
    # second, and each looks at the 60 waiting jobs' inputs with no core to give them
    as_is = rounds(tmp_path, patched=False)
    patched = rounds(tmp_path, patched=True)
    # 121 jobs, each ending in a round (and a timer's a second): about one selection per job
    assert patched[0] <= 121 + 20 and patched[1] <= 5, patched
    assert as_is[0] > 2 * patched[0] and as_is[1] > 50, as_is
    # a ready job's inputs are finished files: their sizes asked once, not in every round (the 121
    # jobs' files are asked for elsewhere too, as each is written: 301 in all here, 2,566 as-is)
    assert patched[2] <= 3 * 121 and as_is[2] > 5 * patched[2], (as_is, patched)


RAISED = """
import sys
sys.path.insert(0, {src!r})
from ethosweep.runtime.scheduling import set_priorities

rule all:
    input: "first", "second"
rule first:
    output: "first"
    priority: 10
    shell: "echo first >> order; touch {{output}}"
rule second:
    output: "second"
    shell: "echo second >> order; touch {{output}}"
onstart:
    jobs = [job for job in workflow.dag.needrun_jobs() if job.rule.name == "second"]
    assert set_priorities(workflow.dag, jobs, [1000])
"""


def test_priorities_set_when_the_run_starts_are_what_the_scheduler_follows(tmp_path):
    """ethosweep.runtime.estimate.chain_first's priorities reach Snakemake through its DAG's own
    table (set_priorities): on one core, the job raised at the start runs before the one its rule
    ranks higher."""
    (tmp_path / "Snakefile").write_text(RAISED.format(src=str(REPO / "src")))
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--scheduler", "greedy", "--quiet", "all"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "order").read_text().split() == ["second", "first"]


GATHERED = """
import sys
sys.path.insert(0, {src!r})
from snakemake.io import _IOFile
from snakemake.jobs import Job
from ethosweep.runtime.scheduling import without_quadratic_input_check

as_is = Job.is_pipe_or_service_input
{patch}
asked = Job.is_pipe_or_service_input
# what the test reads: the file hashes the question cost in all, and answers unlike Snakemake's own
seen = {{"hashes": 0, "unlike": 0, "piped": 0}}
hashes = _IOFile.__hash__
def counted_hash(self):
    seen["hashes"] += 1
    return hashes(self)
def counted(self, path):
    _IOFile.__hash__ = counted_hash
    try:
        answer = asked(self, path)
    finally:
        _IOFile.__hash__ = hashes
    seen["unlike"] += answer != as_is(self, path)
    seen["piped"] += answer
    return answer
Job.is_pipe_or_service_input = counted

rule all:
    input: "gathered", "read"
rule cell:
    output: "cells/{{i}}"
    shell: "touch {{output}}"
rule gather:
    input: expand("cells/{{i}}", i=range(80))
    output: "gathered"
    shell: "touch {{output}}"
rule write:
    output: pipe("stream")
    shell: "echo streamed > {{output}}"
rule read:
    input: "stream", "cells/0"
    output: "read"
    shell: "cat {{input[0]}} > {{output}}"
onsuccess:
    print(f"hashes {{seen['hashes']}} unlike {{seen['unlike']}} piped {{seen['piped']}}")
"""


def asked_before_running(tmp_path, patched: bool) -> dict:
    """What asking each job's inputs whether they are pipes cost (file hashes) and answered, in a
    toy end of run: a job reading 80 jobs' files, and a pipe beside it."""
    patch = "assert without_quadratic_input_check()" if patched else ""
    folder = tmp_path / ("patched" if patched else "as-is")
    folder.mkdir()
    (folder / "Snakefile").write_text(GATHERED.format(src=str(REPO / "src"), patch=patch))
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--quiet", "all"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "read").read_text() == "streamed\n"
    words = done.stdout.split("hashes ")[1].split()
    return {"hashes": int(words[0]), words[1]: int(words[2]), words[3]: int(words[4])}


def test_a_job_reading_every_cell_is_not_asked_its_inputs_times_its_dependencies(tmp_path):
    """Snakemake looks through every dependency's files for each input of a job before it runs
    (Job.is_pipe_or_service_input): the end of run's jobs at 6,000 cells spent half a minute on it."""
    as_is = asked_before_running(tmp_path, patched=False)
    patched = asked_before_running(tmp_path, patched=True)
    # the same answers: the pipe found where it is read, nothing else
    assert as_is["piped"] == patched["piped"] == 1 and patched["unlike"] == 0, (as_is, patched)
    # 80 inputs of 80 dependencies: about inputs x dependencies / 2 lookups as Snakemake is (3,330
    # here), about 2 per input with it (169)
    assert as_is["hashes"] > 80 * 80 / 3 and patched["hashes"] < 3 * 85, (as_is, patched)
