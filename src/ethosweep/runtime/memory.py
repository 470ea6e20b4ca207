"""How much memory a local run may use at once, so `--cores 8` cannot run a machine out of it.

Every rule declares the memory its jobs need (`resources: mem_mb`, measured per job kind: see
docs/performance.md). Snakemake counts those against a total only when one is given
(`--resources mem_mb=N`); a local run without one gets what the machine has available when it
starts, and says so when that, not the cores, is what holds jobs back. On a cluster the
declarations go to the scheduler with each job instead.
"""

from __future__ import annotations

from pathlib import Path

# what the kernel, the desktop and Snakemake itself keep: not given to jobs
RESERVED_FRACTION = 0.1


def available_mb(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable in MB (10^6 bytes, Snakemake's unit), or None where /proc/meminfo is not."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 // 10**6
    except OSError:
        return None
    return None


def local_limit_mb(available: int, largest_job_mb: int) -> int:
    """The total the jobs of a local run may declare at once: the available memory less a reserve,
    never less than the largest job's own need (which would stop the run instead of serialising it)."""
    return max(int(available * (1 - RESERVED_FRACTION)), largest_job_mb)


def holding_back(limit_mb: int, cores: int, job_mb: list[int]) -> str:
    """A line when memory rather than the cores bounds how many jobs run at once ('' otherwise):
    the largest `cores` jobs of the run would need more than the limit together."""
    largest = sorted(job_mb, reverse=True)[:cores]
    if len(largest) < 2 or sum(largest) <= limit_mb:
        return ""
    fit, total = 0, 0
    for need in largest:
        if total + need > limit_mb:
            break
        fit, total = fit + 1, total + need
    return (
        f"memory: {limit_mb / 1000:.1f} GB for jobs (of what is available now); the largest jobs need "
        f"{largest[0] / 1000:.1f} GB each, so as few as {fit} of them run at once on {cores} cores "
        "(`--resources mem_mb=N` sets another total)"
    )
