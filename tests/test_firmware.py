"""Firmware and FVP stages: the runner-output parser on recorded output, the commands per
target family, pool sizing from real .pte files, what the summary says without an SDK, and an
end-to-end build that runs only where an ExecuTorch checkout is configured."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from conftest import U55_CELL, make_workdir, snakemake
from ethosweep.firmware import arm_runner as firmware
from ethosweep.firmware import sdk

LOGS = Path(__file__).parent / "data" / "runner_logs"


def test_parser_reads_every_number_of_a_recorded_corstone320_run():
    parsed = firmware.parse_executor_runner_output((LOGS / "corstone320_mv2_u85.log").read_text())
    assert parsed["npu_cycles"] == 1498202
    assert parsed["cpu_cycles_total"] == 6925114
    assert parsed["cpu_wait_for_npu_cycles"] == 729
    assert parsed["pmu_cycle_counter"] == 5920305
    assert parsed["pmu_counters"] == {0: 359921, 1: 0, 2: 0, 3: 503}
    assert parsed["pmu_events"][0] == "ETHOSU_PMU_EXT0_RD_DATA_BEAT_RECEIVED" and len(parsed["pmu_events"]) == 4
    assert parsed["npu_inferences"] == 1
    assert parsed["pte_loaded_bytes"] == 4425968
    assert (parsed["method_allocator_used_bytes"], parsed["method_allocator_pool_bytes"]) == (1355722, 62914560)
    assert parsed["method_allocator_planned_bytes"] == 752640
    assert parsed["method_allocator_input_bytes"] == 602116
    assert (parsed["temp_allocator_used_bytes"], parsed["temp_allocator_pool_bytes"]) == (0, 1048576)
    # the recording elides outputs 3..995: indices are kept with the values
    assert parsed["output_indices"][0] == [0, 1, 2, 996, 997, 998, 999]
    assert parsed["outputs"][0][0] == pytest.approx(-0.749744) and parsed["outputs"][0][-1] == pytest.approx(1.576386)
    assert parsed["completed"] and parsed["errors"] == [] and parsed["bundleio"] is None


def test_parser_reports_bundleio_verdicts_and_failures():
    recorded = (LOGS / "corstone320_mv2_u85.log").read_text()
    assert (
        firmware.parse_executor_runner_output(
            recorded + "I [executorch:arm_executor_runner.cpp:600] Test_result: PASS\n"
        )["bundleio"]
        == "PASS"
    )
    failed = firmware.parse_executor_runner_output(recorded + "Test_result: PASS\nTest_result: FAIL\n")
    assert failed["bundleio"] == "FAIL"
    # run_fvp.sh's own failure patterns: an error log line, a timeout; and no completion line
    timeout = "Info: Simulation is stopping. Reason: CPU time has been exceeded."
    broken = (
        recorded.replace("Program complete, exiting.", "") + "E [executorch:method.cpp:1] Missing operator\n" + timeout
    )
    parsed = firmware.parse_executor_runner_output(broken)
    assert not parsed["completed"]
    assert parsed["errors"] == ["E [executorch:method.cpp:1] Missing operator", timeout]


def _settings(command: list[str]) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == "-C"]


@pytest.mark.parametrize(
    "target, fvp, macs_setting",
    [
        ("ethos-u55-128", "FVP_Corstone_SSE-300_Ethos-U55", "ethosu.num_macs=128"),
        ("ethos-u55-64", "FVP_Corstone_SSE-300_Ethos-U55", "ethosu.num_macs=64"),
        ("ethos-u65-512", "FVP_Corstone_SSE-300_Ethos-U65", "ethosu.num_macs=512"),
        ("ethos-u85-256", "FVP_Corstone_SSE-320", "mps4_board.subsystem.ethosu.num_macs=256"),
    ],
)
def test_fvp_command_per_family(target, fvp, macs_setting):
    command = firmware.fvp_command(target, "/b/arm_executor_runner", "/r/cell/model.bpte", timelimit_s=120)
    assert command[0] == fvp
    settings = _settings(command)
    board = "mps4_board" if "u85" in target else "mps3_board"
    assert macs_setting in settings
    assert f"{board}.uart0.out_file=-" in settings and f"{board}.uart0.shutdown_on_eot=1" in settings
    assert "cpu0.semihosting-cwd=/r/cell" in settings
    assert "cpu0.semihosting-cmd_line=executor_runner -m model.bpte" in settings
    assert command[-4:] == ["-a", "/b/arm_executor_runner", "--timelimit", "120"]


def test_build_command_and_pools():
    cells = [
        {"planned_buffer_bytes": 3920, "input_bytes": 3136, "scratch_bytes": 18528},
        {"planned_buffer_bytes": 48, "input_bytes": 8, "scratch_bytes": 32},
    ]
    pools = firmware.size_pools(cells, "Shared_Sram")
    # the largest need, plus the method allocator's margin, rounded up to 16 KiB
    assert pools.method_allocator == 80 * 1024 and pools.scratch == 32 * 1024
    config = firmware.RunnerConfig("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    command = firmware.build_command("/et", config, pools, "out")
    assert command[:3] == ["bash", "/et/backends/arm/scripts/build_executor_runner.sh", "--pte=semihosting"]
    assert "--target=ethos-u55-128" in command and "--memory_mode=Shared_Sram" in command
    assert (
        "--extra_build_flags=-DET_ARM_BAREMETAL_METHOD_ALLOCATOR_POOL_SIZE=0x14000 "
        "-DET_ARM_BAREMETAL_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE=0x8000"
    ) in command
    dedicated = firmware.size_pools(cells, "Dedicated_Sram")
    assert "-DET_ARM_BAREMETAL_FAST_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE=0x8000" in dedicated.cmake_flags()


def test_probe_names_what_is_missing_and_how_to_get_it(tmp_path):
    status = sdk.probe({}, base=tmp_path)
    assert not status.firmware_ready()
    names = [c.name for c in status.firmware_missing()]
    assert names[:3] == [
        "ExecuTorch source checkout",
        "setup_path.sh (from examples/arm/setup.sh)",
        "Ethos-U SDK (core_platform, core_driver)",
    ]
    checkout = status.components["executorch_src"]
    assert checkout.problem == "sdk.executorch_src is not set"
    assert f"git clone -b v{status.executorch_version}" in checkout.get_it and "setup.sh" in checkout.get_it
    # a checkout of another ExecuTorch version is refused: its runner would not match the .pte
    other = tmp_path / "executorch"
    (other / "backends/arm/scripts").mkdir(parents=True)
    (other / "backends/arm/scripts/build_executor_runner.sh").write_text("")
    (other / "version.txt").write_text("0.7.0\n")
    mismatch = sdk.probe({"executorch_src": str(other)}, base=tmp_path).components["executorch_src"]
    assert (
        not mismatch.ok
        and f"is ExecuTorch 0.7.0, the installed wheel is {status.executorch_version}" in mismatch.problem
    )


def test_check_sdk_command_lists_every_part(tmp_path, capsys):
    from ethosweep.cli import main

    config = tmp_path / "config.yaml"
    config.write_text("models: []\nsdk: {path: [bin]}\n")
    assert main(["check-sdk", str(config)]) == 1  # firmware cannot be built here
    printed = capsys.readouterr().out
    assert "missing  ExecuTorch source checkout: sdk.executorch_src is not set" in printed
    assert "missing  FVP_Corstone_SSE-320" in printed and "Arm download under EULA" in printed


def test_recorded_scratch_is_the_ptes_and_velas_sram_use(tiny_sweep):
    """The scratch size the Vela job records (what the firmware plan sizes its pool from), ExecuTorch's
    reader of the written .pte's command stream and Vela's report agree."""
    import contextlib
    import io

    from executorch.backends.arm.scripts.get_ethosu_scratch_from_pte import get_scratch_from_pte

    cell = tiny_sweep / "results/vela" / U55_CELL
    with contextlib.redirect_stdout(io.StringIO()):  # it prints per delegate
        from_pte = get_scratch_from_pte(str(cell / "model.pte"))
    recorded = json.loads((cell / "compile.json").read_text())["scratch_bytes"]
    vela = json.loads((cell / "summary.json").read_text())["cell"]
    assert recorded > 0 and recorded == from_pte == round(vela["sram_memory_used"] * 1024)


def vela_blocks(pte: Path, name: str) -> list[bytes]:
    """One block of every Vela payload in a .pte, read by hand from its documented layout
    (executorch/backends/arm/arm_vela.py: 16-byte name, uint32 length, flags, 16-byte aligned data)."""
    import struct

    data, found, start = pte.read_bytes(), [], 0
    while (position := data.find(b"vela_bin_stream", start)) != -1:
        while True:
            block_name = data[position : position + 16].rstrip(b"\0").decode()
            (length,) = struct.unpack("<I", data[position + 16 : position + 20])
            if block_name == name:
                found.append(data[position + 32 : position + 32 + length])
            if block_name == "vela_end_stream":
                break
            position += 32 + (length + 15) // 16 * 16
        start = position + 1
    return found


def test_runner_pools_hold_every_cell_they_serve(tiny_sweep):
    """The plan's pools against needs derived here, independently, from each cell's real .pte
    (the method allocator: ExecuTorch's memory plan in the program, plus the inputs; the scratch
    pool: the scratch_size block of the Vela payload) and its example inputs."""
    import struct

    import torch
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan_dir = tiny_sweep / "results/firmware/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    plan = json.loads((plan_dir / "plan.json").read_text())
    method, scratch = [], []
    for cell in plan["cells"]:
        pte = tiny_sweep / "results/vela" / cell["cell"] / "model.pte"
        program = deserialize_pte_binary(pte.read_bytes()).program
        planned = sum(program.execution_plan[0].non_const_buffer_sizes)
        inputs = torch.load(tiny_sweep / "results/export" / cell["cell"].split("/")[0] / "inputs.pt", weights_only=True)
        method.append(planned + sum(t.numel() * t.element_size() for t in inputs))
        scratch.append(max(struct.unpack("<I", block)[0] for block in vela_blocks(pte, "scratch_size")))
    assert len(method) == 4  # mnist, add, ds_cnn, mnist_digits on this configuration
    align = 16 * 1024
    assert plan["pools"]["method_allocator_bytes"] == (max(method) + 64 * 1024 + align - 1) // align * align
    assert plan["pools"]["scratch_bytes"] == (max(scratch) + align - 1) // align * align
    assert max(scratch) == round(
        max(
            json.loads((tiny_sweep / "results/vela" / c["cell"] / "summary.json").read_text())["cell"][
                "sram_memory_used"
            ]
            * 1024
            for c in plan["cells"]
        )
    )


def test_without_sdk_every_cell_says_what_firmware_and_fvp_lack(tiny_sweep):
    plan = json.loads(
        (tiny_sweep / "results/firmware/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/plan.json").read_text()
    )
    needs = {c["cell"]: c for c in plan["cells"]}
    assert (
        needs[U55_CELL]["input_bytes"] == 1 * 1 * 28 * 28 * 4
    )  # (the pools: test_runner_pools_hold_every_cell_they_serve)
    with open(tiny_sweep / "results/summary.csv") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        assert row["firmware"].startswith("not configured: ExecuTorch source checkout: sdk.executorch_src is not set")
        assert row["fvp_run"].startswith("not run: no firmware; FVP_Corstone_SSE-3")
        assert float(row["runner_method_pool_kib"]) > 0 and row["fvp_npu_cycles"] == ""
    assert not list((tiny_sweep / "results").glob("firmware/*/*/*/arm_executor_runner"))
    # the terminal table says it once, not once per cell
    from ethosweep.results.terminal import format_table

    footer = format_table(rows).splitlines()
    cells = {tuple(r[k] for k in ("model", "quantization", "target", "system_config", "memory_mode")) for r in rows}
    assert (
        f"{len(cells)} of {len(cells)} cells ok ({len(rows)} rows: a cell appears once per board it is on); "
        "cycles and memory are Vela's compiler estimates." in footer
    )
    assert footer[-2].startswith("firmware: not configured, missing ") and "ExecuTorch source checkout" in footer[-2]
    assert footer[-1].startswith("FVP runs: none, FVP_Corstone_SSE-300_Ethos-U55, FVP_Corstone_SSE-320 not found")


EXECUTORCH_SRC = os.environ.get("ETHOSWEEP_EXECUTORCH_SRC")


@pytest.mark.skipif(
    not EXECUTORCH_SRC,
    reason="set ETHOSWEEP_EXECUTORCH_SRC to an ExecuTorch checkout of the "
    "installed version prepared with examples/arm/setup.sh (and install gcc-arm-none-eabi) "
    "to build the runner end to end",
)
def test_firmware_builds_a_runner_per_configuration(tmp_path):
    config = {
        "models": [{"name": "mnist", "file": "models/mnist.py"}],
        "targets": ["ethos-u55-128"],
        "memory_modes": ["Shared_Sram"],
        "sdk": {"executorch_src": EXECUTORCH_SRC},
    }
    workdir = make_workdir(tmp_path / "fw", config)
    snakemake(workdir)
    runner = workdir / "results/firmware/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    assert (runner / "arm_executor_runner").read_bytes()[:4] == b"\x7fELF"
    sizes = json.loads((runner / "sizes.json").read_text())
    assert sizes["text_bytes"] > 0


def test_cmake_and_ninja_come_from_the_lock_unless_the_user_points_elsewhere(tmp_path):
    """uv.lock pins CMake and Ninja (PyPI's wheels): the firmware stages use those of ethosweep's
    environment, not whatever the system has; a folder in sdk.path comes first."""
    import sys

    environment = Path(sys.executable).parent
    status = sdk.probe({}, base=tmp_path)
    assert status.components["cmake"].path == str(environment / "cmake")
    assert status.components["ninja"].path == str(environment / "ninja")
    mine = tmp_path / "tools"
    mine.mkdir()
    (mine / "cmake").write_text("#!/bin/sh\n")
    (mine / "cmake").chmod(0o755)
    assert sdk.probe({"path": [str(mine)]}, base=tmp_path).components["cmake"].path == str(mine / "cmake")
