"""About how long a run takes (ethosweep.runtime.estimate): from the CPU seconds jobs' logs recorded,
scheduled onto the cores as Snakemake schedules them."""

from __future__ import annotations

from ethosweep.runtime.estimate import JOB_OVERHEAD_SECONDS, STAGE_SECONDS, Job, duration, estimate, measured_by_rule


def log(tmp_path, name: str, cpu: float) -> str:
    path = tmp_path / f"{name}.log"
    done = f"ethosweep: done in {3 * cpu:.1f} s (CPU {cpu:.1f} s, process peak RSS 900 MiB)"
    path.write_text(f"ethosweep: lower_to_tosa {name}\n{done}\n")
    return str(path)


def test_a_run_is_its_longest_chain_or_its_work_over_the_cores(tmp_path):
    # two chains: export (10 s) -> lower (100 s), and export (10 s) -> lower (20 s), plus 40 Vela jobs of 1 s
    jobs = [
        Job("export_model", log(tmp_path, "e1", 10 - JOB_OVERHEAD_SECONDS), priority=50),
        Job("lower_to_tosa", log(tmp_path, "l1", 100 - JOB_OVERHEAD_SECONDS), priority=30, needs=[0]),
        Job("export_model", log(tmp_path, "e2", 10 - JOB_OVERHEAD_SECONDS), priority=50),
        Job("lower_to_tosa", log(tmp_path, "l2", 20 - JOB_OVERHEAD_SECONDS), priority=30, needs=[2]),
        *(Job("compile_with_vela", None, needs=[1]) for _ in range(40)),
    ]
    measured = measured_by_rule([("compile_with_vela", log(tmp_path, "v", 1 - JOB_OVERHEAD_SECONDS))])
    two = estimate(jobs, 2, measured)
    # the 100 s lowering ends at 110 s; the 40 Vela jobs after it on 2 cores: 20 s more
    assert two.seconds == 130 and two.job_seconds == 180 and two.measured == 44
    assert estimate(jobs, 1, measured).seconds == 180  # one core: everything in a row
    assert "every job's time measured here" in two.said() and two.said().startswith("about 2 min on 2 cores")


def test_an_unmeasured_stage_costs_its_median_on_this_machine():
    cold = estimate([Job("lower_to_tosa", None), Job("compile_with_vela", None, needs=[0])], 2, {})
    assert cold.seconds == STAGE_SECONDS["lower_to_tosa"] + STAGE_SECONDS["compile_with_vela"] and cold.measured == 0
    assert "the default matrix's stage costs on this project's machine" in cold.said()


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (3, 89, 600, 3600, 20_400)] == ["3 s", "89 s", "10 min", "1 h 00 min", "5 h 40 min"]
