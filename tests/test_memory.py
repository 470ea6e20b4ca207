"""A local run's memory total: what the machine has available, and the line when it holds jobs back."""

from ethosweep.runtime import memory


def test_the_available_memory_is_read_as_the_kernel_reports_it(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
    assert memory.available_mb(meminfo) == 20000000 * 1024 // 10**6  # kB are KiB; Snakemake's MB are 10^6 bytes
    assert memory.available_mb(tmp_path / "none") is None
    assert memory.available_mb() > 0  # this machine's


def test_the_limit_keeps_a_reserve_and_never_stops_the_largest_job():
    assert memory.local_limit_mb(20000, 2000) == 18000
    assert memory.local_limit_mb(1500, 2000) == 2000  # serialised, not refused


def test_a_line_says_when_memory_not_cores_bounds_the_jobs_at_once():
    # 24 GB machine, --cores 8, the largest jobs (exports, quantizations, lowerings) declare 2 GB
    assert memory.holding_back(21000, 8, [2000] * 20 + [500] * 50) == ""
    said = memory.holding_back(5000, 8, [2000] * 20)
    assert "as few as 2 of them run at once on 8 cores" in said and "--resources mem_mb=N" in said
    assert memory.holding_back(5000, 8, [2000]) == ""  # one job: nothing to hold back
