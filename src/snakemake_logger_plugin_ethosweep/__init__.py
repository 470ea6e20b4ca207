"""ethosweep's terminal output for Snakemake: progress in a few lines instead of a block per job.

A Snakemake logger plugin (snakemake-interface-logger-plugins; Snakemake finds it by its
module name and the default profile selects it with `logger: [ethosweep]`). A sweep runs
hundreds of short jobs; Snakemake's default output prints ~15 lines for each. This prints:

- on a terminal, one status line, rewritten in place: the stage running, jobs and cells done,
  failures so far and, in a long run, about how long is left (the jobs not yet finished, at the
  pace the finished ones kept against what the run's first line expected of them);
- elsewhere (a CI log, a pipe), the same line when a stage starts, at every tenth of the jobs and,
  in a long run, at least every ten minutes (a zoo's first tenth takes hours), also while nothing
  ends: a job that has run ten minutes or more is named with its time (a cell whose Vela crashes
  can search for most of an hour);
- every warning and error as it comes. A failed job prints its own `ethosweep: FAILED ...`
  line the moment it fails (ethosweep.runtime.jobs); that goes straight to the terminal.

The end-of-run table is printed by the workflow (onsuccess/onerror), as before. Dry runs and
`--verbose` get Snakemake's own output in full: `uv run snakemake --cores 8 --verbose` shows every
job block again.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

# The rule that finishes a cell: its count is the "cells compiled" figure.
CELL_RULE = "compile_with_vela"
# Off a terminal, a line at least this often while jobs run: a zoo's tenth takes an hour
MILESTONE_SECONDS = 600
# How often the status is looked at while no job starts or ends (a thread of the handler's own; 0: never)
HEARTBEAT_SECONDS = 60
# Snakemake's per-job and per-run bookkeeping: what the progress line replaces. Every other
# message (warnings, errors, "Nothing to be done", "Unlocked working directory", an executor's
# "submitted with SLURM jobid ...", the report's path) is printed as Snakemake prints it.
QUIET_EVENTS = {
    "JOB_INFO",
    "JOB_STARTED",
    "JOB_FINISHED",
    "PROGRESS",
    "RUN_INFO",
    "SHELLCMD",
    "GROUP_INFO",
    "RESOURCES_INFO",
    "DEBUG_DAG",
    "RULEGRAPH",
    "WORKFLOW_STARTED",
}
NOISE = re.compile(
    r"^(Assuming unrestricted shared filesystem|host: |Building DAG of jobs|Using shell: |Provided cores: |"
    r"Provided resources: |Rules claiming more threads|Select jobs to execute|Execute \d+ jobs|Finished jobid: |"
    r"Job stats:|Conda environments: |Waiting for more resources|Removing temporary output|Touching output file|"
    r"\[\w{3} \w{3} +\d+ )"
)


# Each job's expected seconds (jobid -> seconds), from the estimate of the run's first line, which the
# workflow hands over as it starts (workflow/rules/messages.smk); empty until then.
EXPECTED: dict = {}
# The time left is said once the finished jobs hold this share of the run's expected seconds:
# before that the pace rests on a few jobs.
PACE_SHARE = 0.02


def expect(seconds_by_job: dict) -> None:
    EXPECTED.clear()
    EXPECTED.update(seconds_by_job)


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    pass


@dataclass
class Progress:
    total: int = 0
    done: int = 0
    running: Counter = field(default_factory=Counter)  # rule -> jobs running
    rule_of_job: dict = field(default_factory=dict)  # jobid -> rule
    finished: Counter = field(default_factory=Counter)  # rule -> jobs finished
    planned: Counter = field(default_factory=Counter)  # rule -> jobs started so far
    failed: int = 0
    running_since: dict = field(default_factory=dict)  # jobid -> when it started (its rule: rule_of_job)
    name_of_job: dict = field(default_factory=dict)  # jobid -> 'rule wildcard/values', as a FAILED line names it
    stages_seen: list = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    expected_done: float = 0.0  # the expected seconds of the jobs finished so far (EXPECTED)

    def line(self) -> str:
        share = f"{100 * self.done // self.total:3d}%" if self.total else "  ?%"
        # A cluster executor reports no job start (Snakemake logs JOB_INFO for local jobs only), so
        # what runs is said only when it is known
        running = ", ".join(f"{rule}" + (f" x{n}" if n > 1 else "") for rule, n in self.running.items() if n)
        running = f" running {running}" if running else ""
        cells = f"; cells compiled {self.finished[CELL_RULE]}" if self.planned[CELL_RULE] else ""
        failed = f"; {self.failed} failed" if self.failed else ""
        elapsed = time.monotonic() - self.started
        so_far = f"; {_minutes(elapsed)} so far" if elapsed >= 90 else ""
        left = self.seconds_left(elapsed)
        # not said under a minute: the last jobs (bundles, the report) are mostly Snakemake's own
        # time, which the estimate counts at a fixed overhead, so their pace is not the run's
        so_far += f", about {_minutes(left)} left" if so_far and left is not None and left >= 60 else ""
        done = f"{self.done:>{len(str(self.total))}}/{self.total} {share}"
        return f"ethosweep: [{done}]{running}{cells}{failed}{so_far}{self.longest_running()}"

    def longest_running(self) -> str:
        """'; compile_with_vela mobilevit_xs/int8/... running for 36 min' once a job has run
        MILESTONE_SECONDS: which cell holds a core, so that it can be looked at (its log) or left."""
        if not self.running_since:
            return ""
        job, since = min(self.running_since.items(), key=lambda started: started[1])
        seconds = time.monotonic() - since
        name = self.name_of_job.get(job) or f"a {self.rule_of_job[job]} job"
        return f"; {name} running for {_minutes(seconds)}" if seconds >= MILESTONE_SECONDS else ""

    def seconds_left(self, elapsed: float) -> float | None:
        """The expected seconds of the jobs not yet finished at the pace of those finished (which
        takes in the cores, what runs beside the run and how far off the estimate is), once they
        are PACE_SHARE of the run; None before, or without an estimate."""
        total = sum(EXPECTED.values())
        if not total or self.expected_done < PACE_SHARE * total:
            return None
        return max(0.0, total - self.expected_done) * elapsed / self.expected_done


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        from snakemake.logging import DefaultFilter, DefaultFormatter

        settings = self.common_settings
        self.full = bool(settings.verbose or settings.dryrun)
        self.default_filter = DefaultFilter(
            settings.quiet, settings.debug_dag, settings.verbose, settings.dryrun, settings.printshellcmds
        )
        self.formatter_ = DefaultFormatter(settings.quiet, settings.show_failed_logs)
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.progress = Progress()
        self.last_tenth = -1
        self.status_shown = False
        self.last_milestone_at = time.monotonic()
        self.closed = False
        if not self.full and HEARTBEAT_SECONDS:
            import threading

            threading.Thread(target=self._heartbeat, name="ethosweep-progress", daemon=True).start()

    # ---- what Snakemake asks of a plugin ----
    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._locate_config_error(record)
            if self.full:
                if self.default_filter.filter(record):
                    text = self.formatter_.format(record)
                    if text:
                        self._print(text)
                return
            self._compact(record)
        except Exception:  # noqa: BLE001 - logging must never stop the run
            self.handleError(record)

    def close(self) -> None:
        self.closed = True
        self._end_status()
        super().close()

    def _heartbeat(self) -> None:
        """While jobs run and none ends (a crash's search, a large model's lowering), the status as
        often as it would be said if they did: Snakemake logs nothing in between."""
        while not self.closed:
            time.sleep(HEARTBEAT_SECONDS)
            with self.lock:  # as Handler.handle holds it around emit
                self.tick()

    def tick(self) -> None:
        if not self.closed and self.progress.total and self.progress.done < self.progress.total:
            self._status()

    def _locate_config_error(self, record: logging.LogRecord) -> None:
        """Snakemake says a config file is not valid YAML, naming neither the file nor the line: say
        both (the config files the command names and the workflow's own, parsed again)."""
        message = record.getMessage() if isinstance(record.msg, str) else ""
        if "is not valid JSON or YAML" not in message:
            return
        from ethosweep.matrix.config_file import yaml_problems

        for problem in yaml_problems([*_configfiles_in(sys.argv), "config/config.yaml"]):
            self._print(f"ethosweep: the config does not parse: {problem}")

    # ---- the compact display ----
    def _compact(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)  # what snakemake.logging.get_event reads
        p = self.progress
        if event == LogEvent.JOB_INFO:
            rule = record.rule_name
            p.rule_of_job[record.jobid] = rule
            p.running[rule] += 1
            p.running_since[record.jobid] = time.monotonic()
            wildcards = getattr(record, "wildcards", None) or {}
            p.name_of_job[record.jobid] = " ".join([rule, "/".join(str(v) for v in wildcards.values() if v)]).strip()
            p.planned[rule] += 1
            if rule not in p.stages_seen and p.total:
                p.stages_seen.append(rule)
                self._milestone()
            else:
                self._status()
        elif event == LogEvent.JOB_FINISHED:
            rule = p.rule_of_job.get(record.job_id)
            if rule is not None:
                p.running[rule] -= 1
                p.finished[rule] += 1
            p.running_since.pop(record.job_id, None)
            p.name_of_job.pop(record.job_id, None)
            p.expected_done += EXPECTED.get(record.job_id, 0.0)
        elif event == LogEvent.PROGRESS:
            p.done, p.total = record.done, record.total
            tenth = 10 * p.done // p.total if p.total else 0
            if tenth != self.last_tenth:
                self.last_tenth = tenth
                self._milestone()
            else:
                self._status()
        elif event in (LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR):
            p.failed += 1
            rule = getattr(record, "rule_name", None)
            if rule is not None and p.running[rule] > 0:
                p.running[rule] -= 1
            p.running_since.pop(getattr(record, "jobid", None), None)
            self._status()
        elif getattr(event, "name", "") in QUIET_EVENTS:
            return
        elif record.levelno >= logging.WARNING or event == LogEvent.ERROR:
            self._print(self.formatter_.format(record))
        else:
            message = record.getMessage() if isinstance(record.msg, str) else ""
            if message.strip() and not NOISE.match(message.strip()):
                self._print(self.formatter_.format(record))

    def _milestone(self) -> None:
        """A line that stays: on a terminal it replaces the status line, elsewhere it is the output."""
        self._print(self.progress.line())
        self.last_milestone_at = time.monotonic()

    def _status(self) -> None:
        """On a terminal, the status line rewritten in place; elsewhere a milestone if the last progress line
        is MILESTONE_SECONDS old."""
        if not self.tty and time.monotonic() - self.last_milestone_at >= MILESTONE_SECONDS:
            self._milestone()
        elif self.tty:
            self.stream.write("\r\033[K" + self.progress.line()[: _width()])
            self.stream.flush()
            self.status_shown = True

    def _print(self, text: Optional[str]) -> None:
        if not text:
            return
        self._end_status()
        self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()

    def _end_status(self) -> None:
        if self.status_shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.status_shown = False


def _minutes(seconds: float) -> str:
    """'12 min', '5 h 40 min'. Said here, not imported: the plugin loads before the workflow, and the
    ethosweep package first on the path may be another checkout's (perf/compile_once.py runs one)."""
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _configfiles_in(argv: list[str]) -> list[str]:
    """The files after --configfile/--configfiles on a command line (as Snakemake reads them)."""
    files, taking = [], False
    for arg in argv[1:]:
        if arg in ("--configfile", "--configfiles"):
            taking = True
        elif arg.startswith("--configfile=") or arg.startswith("--configfiles="):
            files.append(arg.split("=", 1)[1])
        elif arg.startswith("-"):
            taking = False
        elif taking:
            files.append(arg)
    return files


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((120, 20)).columns - 1
