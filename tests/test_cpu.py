"""CPU-only cells (cortex-m55, ExecuTorch's Cortex-M backend, no NPU): the lowering and its
reference, the runner-output parser on a recorded QEMU run, commands, memory fit, what the
summary says without an SDK, the platform layer in QEMU (where the Debian toolchain and QEMU are
installed: .ci/run installs them), and an end-to-end firmware run where an ExecuTorch checkout is set."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, make_workdir, snakemake
from ethosweep.compile.artifacts import load_tensors
from ethosweep.compile.cortex_m import _user_input_placeholders, input_bytes, lower_for_cortex_m
from ethosweep.firmware import own_runner as cf
from ethosweep.firmware import qemu, sdk
from ethosweep.matrix.expand import ConfigError, build_sweep
from ethosweep.runtime.io import read_json

LOGS = Path(__file__).parent / "data" / "runner_logs"
MNIST_CPU = "results/cpu/mnist/int8/cortex-m55"


def test_cpu_cells_cross_models_with_the_schemes_the_cortex_m_quantizer_has():
    config = {
        "models": [
            {
                "name": "add",
                "import": "executorch.examples.models.toy_model:AddModule",
                "inputs": [{"shape": [1]}, {"shape": [1]}],
            }
        ],
        "targets": ["ethos-u55-128"],
        "memory_modes": ["Shared_Sram"],
        "quantization": ["int8", "a16w8"],
        "cpu_targets": ["cortex-m55"],
    }
    sweep = build_sweep(config)
    assert [c.id for c in sweep.cpu_cells] == ["add/int8/cortex-m55"]
    assert ("cortex-m55 x a16w8", "the Cortex-M quantizer has int8 only") in sweep.skipped
    with pytest.raises(ConfigError, match="cpu_targets: unknown CPU 'cortex-m4'; allowed: cortex-m55"):
        build_sweep({**config, "cpu_targets": ["cortex-m4"]})


def test_lowering_puts_the_convolutions_on_cmsis_nn_and_keeps_a_real_reference(tiny_sweep):
    meta = read_json(tiny_sweep / MNIST_CPU / "lower.json")
    pte = (tiny_sweep / MNIST_CPU / "model.pte").read_bytes()
    assert pte[4:8] == b"ET12" and meta["pte_bytes"] == len(pte)
    assert meta["operators"]["cortex_m::quantized_conv2d"] == 1
    assert meta["operators"]["cortex_m::quantized_linear"] == 2
    assert meta["cmsis_nn_ops"] == 6 and meta["portable_ops"] == 2
    assert meta["versions"]["executorch"] and meta["versions"]["torch"]
    # the run input is the model's example input (no dataset), as the .pte lays it out
    example = load_tensors(tiny_sweep / "results/export/mnist/inputs.pt")[0]
    assert (tiny_sweep / MNIST_CPU / "run_inputs.bin").read_bytes() == example.numpy().tobytes()
    reference = torch.load(tiny_sweep / MNIST_CPU / "reference.pt", weights_only=True)
    scale = reference["scales"][0]
    assert 0 < scale < 0.01
    # the lowered int8 program tracks the float model to a few output steps
    assert float((reference["expected"][0] - reference["float"][0]).abs().max()) <= 4 * scale
    digits = read_json(tiny_sweep / "results/cpu/mnist_digits/int8/cortex-m55/lower.json")
    assert digits["run_input"] == "held-out sample 0 (digits)"
    assert digits["calibrated_on"].startswith("100 samples of digits")


def test_input_bytes_follow_the_programs_dim_order():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    x = torch.rand(1, 3, 8, 8)
    edge, _ = lower_for_cortex_m(model, (x,), [(x,)], "cortex-m55")
    placeholders = _user_input_placeholders(edge.exported_program())
    assert placeholders[0].meta["val"].dim_order() == (0, 2, 3, 1)
    raw = input_bytes((x,), placeholders)
    assert raw == x.permute(0, 2, 3, 1).contiguous().numpy().tobytes()
    assert raw != x.numpy().tobytes()


def test_parser_reads_a_recorded_qemu_run():
    parsed = qemu.parse_runner_output((LOGS / "qemu_mps3_an547_resnet8.log").read_text())
    assert (parsed["program_bytes"], parsed["method"], parsed["planned_bytes"]) == (98120, "forward", 49728)
    assert parsed["inputs"] == [{"index": 0, "dtype": 6, "shape": [1, 3, 32, 32], "bytes": 12288}]
    assert parsed["outputs"] == [{"index": 0, "dtype": 6, "shape": [1, 10], "bytes": 40}]
    assert parsed["method_allocator"] == {"used": 60920, "size": 115712}
    assert parsed["temp_allocator"] == {"used": 0, "size": 262144}
    assert parsed["done"] and parsed["errors"] == []


def test_parser_reports_the_runners_errors():
    text = (
        "E executorch:method.cpp:812] Missing operator: [0] aten::gelu.out\n"
        "ethosweep-runner: load_method error=0x14\n"
        "ethosweep-runner: error: load_method failed (an operator missing from this runner's kernels?)\n"
    )
    parsed = qemu.parse_runner_output(text)
    assert not parsed["done"]
    assert parsed["et_error"] == {"stage": "load_method", "code": "0x14"}
    assert parsed["errors"] == ["load_method failed (an operator missing from this runner's kernels?)"]
    assert parsed["log"] == ["E executorch:method.cpp:812] Missing operator: [0] aten::gelu.out"]


def test_outputs_are_compared_in_output_steps():
    scale = 0.05
    expected = [torch.tensor([[0.10, 0.50, -0.20]])]
    exact = qemu.compare_outputs([np.array([[0.10, 0.50, -0.20]], dtype=np.float32)], expected, expected, 1, [scale])
    assert exact["match"] and exact["same_top1"] and exact["max_diff_steps"] == 0.0
    assert "label 1, firmware top-1 1" in exact["line"]
    off = qemu.compare_outputs([np.array([[0.10, 0.40, 0.55]], dtype=np.float32)], expected, expected, None, [scale])
    assert not off["match"] and off["max_diff_steps"] == 15.0 and not off["same_top1"]
    assert off["line"].startswith("differs from the PyTorch reference")
    raw = np.array([1.0, 2.0], dtype=np.float32).tobytes() + np.array([3], dtype=np.int8).tobytes()
    arrays = qemu.split_outputs(
        raw, [{"index": 0, "dtype": 6, "shape": [1, 2], "bytes": 8}, {"index": 1, "dtype": 1, "shape": [1], "bytes": 1}]
    )
    assert arrays[0].tolist() == [[1.0, 2.0]] and arrays[1].tolist() == [3]


def test_section_sizes_and_memory_fit_of_a_real_runner():
    sizes = cf.parse_section_sizes((LOGS / "size_A_runner_resnet8.txt").read_text())
    assert sizes == {"text": 152684, "data": 3192, "bss": 403408, "heap": 64 * 1024 * 1024, "stack": 1024 * 1024}
    fit = cf.memory_fit(sizes, 98120)
    assert fit["fits"] and fit["line"].startswith("fits: code 149.1 KiB, data+bss (pools) 397.1 KiB, .pte 95.8 KiB")
    too_big = cf.memory_fit(sizes, 65 * 1024 * 1024)
    assert not too_big["fits"] and too_big["line"].startswith("does not fit: .pte 68157440 B in a 67108864 B heap")


def test_build_and_qemu_commands():
    configure = cf.executorch_configure_command("/src/executorch", "cortex-m55", "/b", "/i", "python3", "/cmsis")
    # the CMake and Ninja locked in ethosweep's environment (uv.lock), not whatever the system has
    environment = str(Path(sys.executable).parent)
    assert configure[:6] == [f"{environment}/cmake", "-S", "/src/executorch", "-B", "/b", "-G"]
    assert f"-DCMAKE_MAKE_PROGRAM={environment}/ninja" in configure
    for flag in (
        "--preset",
        "arm-baremetal",
        "-DTARGET_CPU=cortex-m55",
        "-DEXECUTORCH_BUILD_ARM_BAREMETAL=OFF",
        "-DCMAKE_INSTALL_PREFIX=/i",
        "-DCMSIS_NN_LOCAL_PATH=/cmsis",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    ):
        assert flag in configure
    assert not any("CMSIS_NN" in a for a in cf.executorch_configure_command("/s", "cortex-m55", "/b", "/i", "p"))
    method_pool, temp_pool = cf.pool_sizes(49728)
    assert method_pool == 115712 and method_pool >= 49728 + cf.POOL_HEADROOM
    runner = cf.runner_configure_command(
        "/src/executorch", "/i", "/w/model.pte", "/rb", "python3", method_pool, temp_pool
    )
    assert "-DCMAKE_TOOLCHAIN_FILE=/src/executorch/examples/arm/ethos-u-setup/arm-none-eabi-gcc.cmake" in runner
    assert "-DETHOSWEEP_METHOD_POOL_BYTES=115712" in runner and "-DSEMIHOSTING=ON" in runner
    assert runner[runner.index("-S") + 1] == str(REPO / "firmware" / "runner")
    command = qemu.qemu_command("/w/runner.elf", "model.pte", "inputs.bin", "outputs.bin")
    assert command[:3] == ["qemu-system-arm", "-M", "mps3-an547"] and command[-2:] == ["-kernel", "/w/runner.elf"]
    assert (
        "enable=on,target=native,arg=ethosweep_runner,arg=model.pte,arg=inputs.bin,arg=outputs.bin"
        == command[command.index("-semihosting-config") + 1]
    )


def test_probe_says_what_cpu_firmware_lacks(tmp_path):
    status = sdk.probe({"qemu": "no-such-qemu"})
    assert status.cpu_firmware_line().startswith(
        "not configured: ExecuTorch source checkout: sdk.executorch_src is not set"
    )
    assert status.qemu_line() == (
        "not run: no-such-qemu not found on PATH or sdk.path; get it: apt-get install qemu-system-arm"
    )
    checkout = tmp_path / "executorch"
    (checkout / "backends/arm/scripts").mkdir(parents=True)
    (checkout / "backends/arm/scripts/build_executor_runner.sh").write_text("")
    (checkout / "version.txt").write_text("1.4.0\n")
    other = sdk.probe({"executorch_src": str(checkout)}).components["executorch_src"]
    assert not other.ok and "sdk.allow_version_mismatch: true to use it anyway" in other.problem
    allowed = sdk.probe({"executorch_src": str(checkout), "allow_version_mismatch": True}).components["executorch_src"]
    assert allowed.ok and "allowed: " in allowed.name and "is ExecuTorch 1.4.0" in allowed.name


def test_without_sdk_every_cpu_cell_says_what_is_missing(tiny_sweep):
    rows = list(csv.DictReader(open(tiny_sweep / "results/cpu/summary.csv")))
    assert [r["model"] for r in rows] == ["mnist", "add", "ds_cnn", "mnist_digits"]
    for row in rows:
        assert row["firmware"].startswith("not configured: ExecuTorch source checkout: sdk.executorch_src is not set")
        assert row["qemu_run"] == "not run: no runner ELF"
        assert row["torch_version"] and row["executorch_version"] and row["vela_version"] and row["tosa_tools_version"]
    assert int(rows[0]["pte_bytes"]) == (tiny_sweep / MNIST_CPU / "model.pte").stat().st_size
    index = (tiny_sweep / "results/report/index.html").read_text()
    section = index[index.index("CPU only (no NPU)") : index.index("<h2>Cells</h2>")]
    assert f"{int(rows[0]['pte_bytes']):,}" in section and section.count("<tr>") == 1 + len(rows)


def _have(*programs: str) -> bool:
    return all(shutil.which(p) for p in programs)


@pytest.mark.skipif(
    not _have("arm-none-eabi-gcc", "qemu-system-arm"),
    reason="needs Debian's gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm (.ci/run installs them)",
)
def test_platform_layer_boots_in_qemu_with_argv_files_and_the_fpu(tmp_path):
    """firmware/platform/mps3-an547 on its own: reset, FPU/MVE on, argv and files over semihosting,
    the exit code back to the host: what the ExecuTorch runner stands on."""
    (tmp_path / "probe.c").write_text(r"""
#include <stdio.h>
int main(int argc, char **argv) {
  volatile float x = 1.5f;
  float y = x * (float)argc;                 /* hard-float: faults unless the FPU is on */
  printf("argc=%d last=%s\n", argc, argv[argc - 1]);
  FILE *out = fopen(argv[1], "wb");
  fprintf(out, "%d\n", (int)(y * 100.0f));
  fclose(out);
  return 5;
}
""")
    platform = REPO / "firmware" / "platform" / "mps3-an547"
    elf = tmp_path / "probe.elf"
    subprocess.run(
        [
            "arm-none-eabi-gcc",
            "-mcpu=cortex-m55",
            "-mthumb",
            "-mfloat-abi=hard",
            "-O2",
            "--specs=rdimon.specs",
            "-nostartfiles",
            f"-T{platform / 'mps3-an547.ld'}",
            str(platform / "startup.c"),
            str(tmp_path / "probe.c"),
            "-o",
            str(elf),
        ],
        check=True,
    )
    command = qemu.qemu_command(elf, "out.txt", "in.bin", "last-arg")
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 5, result.stdout + result.stderr
    assert result.stdout.strip() == "argc=4 last=last-arg"
    assert (tmp_path / "out.txt").read_text() == "600\n"


EXECUTORCH_SRC = os.environ.get("ETHOSWEEP_EXECUTORCH_SRC")


@pytest.mark.skipif(
    not EXECUTORCH_SRC or not _have("arm-none-eabi-gcc", "qemu-system-arm"),
    reason="set ETHOSWEEP_EXECUTORCH_SRC to an ExecuTorch checkout (and install gcc-arm-none-eabi, "
    "qemu-system-arm) to build a runner and run it in QEMU",
)
def test_cpu_cell_builds_a_runner_and_matches_pytorch_in_qemu(tmp_path):
    sdk_section = {
        "executorch_src": EXECUTORCH_SRC,
        "allow_version_mismatch": os.environ.get("ETHOSWEEP_ALLOW_VERSION_MISMATCH") == "1",
    }
    if os.environ.get("ETHOSWEEP_CMSIS_NN_SRC"):
        sdk_section["cmsis_nn_src"] = os.environ["ETHOSWEEP_CMSIS_NN_SRC"]
    workdir = make_workdir(
        tmp_path,
        {
            "models": [{"name": "mnist", "file": "models/mnist.py"}],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
            "cpu_targets": ["cortex-m55"],
            "sdk": sdk_section,
        },
    )
    snakemake(workdir)
    firmware = read_json(workdir / MNIST_CPU / "firmware.json")
    assert firmware["text"] > 50_000 and firmware["fit"]["fits"]
    assert "cortex_m::quantized_conv2d.out" in firmware["kernels"]["cortex_m"]
    run = read_json(workdir / MNIST_CPU / "qemu.json")
    assert run["done"] and run["comparison"]["match"] and run["comparison"]["max_diff_steps"] <= 1
    row = next(csv.DictReader(open(workdir / "results/cpu/summary.csv")))
    assert row["qemu_run"].startswith("matches the PyTorch reference")


def test_npu_runner_scope_and_command():
    from ethosweep.matrix.targets import npu_runner_state

    assert npu_runner_state("ethos-u55-128", "ready") == "ready"
    assert npu_runner_state("ethos-u65-512", "not configured: x") == "not configured: x"
    assert npu_runner_state("ethos-u85-256", "ready").startswith(
        "not built: ethosweep's platform layer is Corstone-300's"
    )
    npu = {"target": "ethos-u55-128", "driver": "/d/core_driver", "cmsis": "/d/cmsis_6"}
    command = cf.runner_configure_command("/src/executorch", "/i", "/w/model.pte", "/rb", "python3", 1024, 2048, npu)
    assert command[0] == f"{Path(sys.executable).parent}/cmake" and command[-3:] == [
        "-DETHOSWEEP_NPU=ethos-u55-128",
        "-DETHOSWEEP_ETHOSU_DRIVER=/d/core_driver",
        "-DETHOSWEEP_CMSIS=/d/cmsis_6",
    ]
    status = sdk.probe({})
    assert "Ethos-U core driver sources: sdk.ethos_u_driver_src is not set" in status.npu_runner_line()


def test_summary_says_why_a_cell_has_no_npu_runner(tiny_sweep):
    rows = list(csv.DictReader(open(tiny_sweep / "results/summary.csv")))
    u55 = next(r for r in rows if r["target"] == "ethos-u55-128")
    u85 = next(r for r in rows if r["target"] == "ethos-u85-256")
    assert u55["npu_runner"].startswith("not configured: ExecuTorch source checkout: sdk.executorch_src is not set")
    assert u85["npu_runner"].startswith("not built: ethosweep's platform layer is Corstone-300's")


ETHOS_U_DRIVER_SRC = os.environ.get("ETHOSWEEP_ETHOS_U_DRIVER_SRC")


@pytest.mark.skipif(
    not (EXECUTORCH_SRC and ETHOS_U_DRIVER_SRC) or not _have("arm-none-eabi-gcc", "qemu-system-arm"),
    reason="set ETHOSWEEP_EXECUTORCH_SRC and ETHOSWEEP_ETHOS_U_DRIVER_SRC (Arm's core_driver or a copy, "
    "with cmsis_6 beside it or ETHOSWEEP_CMSIS_SRC) to link the NPU runner",
)
def test_npu_runner_links_the_delegate_and_stops_cleanly_without_an_npu(tmp_path):
    sdk_section = {
        "executorch_src": EXECUTORCH_SRC,
        "ethos_u_driver_src": ETHOS_U_DRIVER_SRC,
        "allow_version_mismatch": os.environ.get("ETHOSWEEP_ALLOW_VERSION_MISMATCH") == "1",
    }
    for key, env in (("cmsis_nn_src", "ETHOSWEEP_CMSIS_NN_SRC"), ("cmsis_src", "ETHOSWEEP_CMSIS_SRC")):
        if os.environ.get(env):
            sdk_section[key] = os.environ[env]
    workdir = make_workdir(
        tmp_path,
        {
            "models": [{"name": "mnist", "file": "models/mnist.py"}],
            "targets": ["ethos-u55-128"],
            "memory_modes": ["Shared_Sram"],
            "sdk": sdk_section,
        },
    )
    snakemake(workdir)
    cell = "results/firmware/cells/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    firmware = read_json(workdir / cell / "firmware.json")
    assert firmware["npu"] == "ethos-u55-128" and firmware["fit"]["fits"]
    symbols = subprocess.run(
        ["arm-none-eabi-nm", "-C", str(workdir / cell / "runner.elf")], capture_output=True, text=True, check=True
    ).stdout
    assert "EthosUBackend::init" in symbols and " ethosu_init" in symbols
    # QEMU's mps3-an547 has no NPU: the driver's init fails and the runner says so (exit 10)
    pte = workdir / "results/vela/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/model.pte"
    shutil.copy(pte, tmp_path / "model.pte")
    result = subprocess.run(
        qemu.qemu_command(workdir / cell / "runner.elf", "model.pte", "in.bin", "out.bin"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 10 and "Ethos-U driver init failed at 0x48102000" in result.stdout
