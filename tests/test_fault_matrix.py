"""The failure contract: every stage x every fault class -> what becomes of the job, its one line, and
what a plain rerun does once the fault is gone. docs/failures.md shows the same table.

A failure is *recorded* when it is the cell's own (the model or its code, an operator refused, a
tool failing on this input, a version the registry does not have, a crash that happens again in a
fresh process): the job writes a failure record in place of its outputs and succeeds, so a plain
rerun keeps it until something it depends on changes. It is *retried* when it is the machine's
(memory, disk, a time limit, an interruption, the registry unreachable): the job fails, Snakemake
deletes its outputs, and the next plain run runs it again. End-of-run jobs (summary, operator map,
plots, report) never record: whatever stops them *fails* the job.

Each row runs the stage's real code through the real job runner (ethosweep.runtime.execute: the
supervised child, the forks of Vela and the reference model, the one classification), with the
fault made for real where that is cheap (tests/faults.py: a null-pointer read, SIGKILL, an
allocation that fails, a full disk, a sleep past the wall-clock limit, Ctrl-C, exits; fake `vela`,
`uv`, QEMU and FVP commands that fail as those tools do; a package registry that refuses or has no
such version) and injected at the stage's seam otherwise. Each retried row then runs the same job
again with the fault gone, and it completes. test_failures.py and test_end_of_run.py show the
rerun half with Snakemake itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import faults
from conftest import REPO

RECORDED, RETRIED, FAILS = "recorded", "retried", "fails the job"
REFUSED = "Non-passthrough operation (Conv2D) could not run on NPU"
VELA_VERSION = "5.1.0"
SIGKILL_WORDS = "SIGKILL"
CRASH_TWICE = "again in a fresh process"

# stage, fault, outcome, the cause the job runner names, and words of the one-line message
CONTRACT = [
    # the model's own code, in its forward() while it is exported
    ("export", "model error", RECORDED, "MODEL", "forward() on ModelInputs raised ValueError: a model error"),
    ("export", "native crash", RECORDED, "CRASH", "crashed (SIGSEGV) running forward() on its example inputs"),
    ("export", "SIGKILL", RETRIED, "MEMORY", "was killed (SIGKILL) while running forward() on its example inputs"),
    ("export", "MemoryError", RETRIED, "MEMORY", "forward() on ModelInputs raised MemoryError"),
    ("export", "ENOSPC", RETRIED, "DISK", "forward() on ModelInputs raised OSError"),
    ("export", "time limit", RETRIED, "TIME", "stopped at its wall-clock limit of 0.03 min"),
    ("export", "interrupt", RETRIED, "INTERRUPT", "interrupted (KeyboardInterrupt)"),
    ("export", "exit", RECORDED, "MODEL", "forward() on ModelInputs called sys.exit(3)"),
    ("export", "process exit", RECORDED, "CRASH", "ended with exit status 3 without a result while running forward()"),
    # torch's own allocator failing (a memory limit, strict overcommit): a RuntimeError, not a MemoryError
    ("export", "torch allocator", RETRIED, "MEMORY", "DefaultCPUAllocator: can't allocate memory"),
    # an unexpected exception in ethosweep's own code (a model spec it cannot read; a builder of its zoo)
    ("export", "ethosweep bug", RECORDED, "BUG", "this is a bug in ethosweep, not in your model: KeyError: 'dtype'"),
    ("export", "zoo builder bug", RECORDED, "BUG", "this is a bug in ethosweep, not in your model: KeyError: 'rnn'"),
    # ... and while its file is imported
    ("import", "exit", RECORDED, "MODEL", "(tests/models/faulty.py): running the file called sys.exit(3)"),
    ("import", "process exit", RECORDED, "CRASH", "(tests/models/faulty.py) ended with exit status 3 without a result"),
    ("import", "native crash", RECORDED, "CRASH", "(tests/models/faulty.py) crashed (SIGSEGV) importing its file"),
    ("import", "MemoryError", RETRIED, "MEMORY", "running the file raised MemoryError"),
    # a model file that downloads its weights during an outage: a real connection refused
    ("import", "network", RETRIED, "NETWORK", "running the file raised URLError: <urlopen error [Errno 111]"),
    # ... and while it is trained (`train:`)
    ("train", "model error", RECORDED, "MODEL", "(tests/models/faulty.py): training raised ValueError: a model error"),
    ("train", "native crash", RECORDED, "CRASH", "model 'faulty' crashed (SIGSEGV) training on digits"),
    ("train", "SIGKILL", RETRIED, "MEMORY", "model 'faulty' was killed (SIGKILL) while training on digits"),
    ("train", "MemoryError", RETRIED, "MEMORY", "training raised MemoryError"),
    # PT2E quantization (calibration) and ExecuTorch's Arm lowering
    ("quantize", "model error", RECORDED, "TOOL", "quantization (int8, TOSA profile u55) failed: ValueError"),
    ("quantize", "native crash", RECORDED, "CRASH", "the PT2E quantizer crashed (SIGSEGV)"),
    ("quantize", "SIGKILL", RETRIED, "MEMORY", "the PT2E quantizer was killed (SIGKILL)"),
    ("quantize", "MemoryError", RETRIED, "MEMORY", "failed: MemoryError"),
    ("quantize", "ENOSPC", RETRIED, "DISK", "failed: OSError"),
    ("quantize", "interrupt", RETRIED, "INTERRUPT", "interrupted (KeyboardInterrupt)"),
    ("lower", "model error", RECORDED, "TOOL", "lowering to TOSA (TOSA-1.0+INT+int16+int4+u55) failed: ValueError"),
    ("lower", "native crash", RECORDED, "CRASH", "ExecuTorch's Arm lowering crashed (SIGSEGV)"),
    ("lower", "SIGKILL", RETRIED, "MEMORY", "ExecuTorch's Arm lowering was killed (SIGKILL)"),
    ("lower", "MemoryError", RETRIED, "MEMORY", "failed: MemoryError"),
    ("lower", "ENOSPC", RETRIED, "DISK", "failed: OSError"),
    ("lower", "time limit", RETRIED, "TIME", "ExecuTorch's Arm lowering was still partitioning and lowering"),
    # Vela, in a fork of the cell's job (the installed version)
    ("vela", "refusal", RECORDED, "REFUSED", f"Vela {VELA_VERSION} cannot compile "),
    ("vela", "native crash", RECORDED, "CRASH", "Vela crashed (SIGSEGV) compiling partition 0 for ethos-u55-128"),
    ("vela", "SIGKILL", RETRIED, "MEMORY", "Vela on partition 0 was killed (SIGKILL), most likely for memory"),
    ("vela", "MemoryError", RETRIED, "MEMORY", "Vela on partition 0: MemoryError"),
    ("vela", "ENOSPC", RETRIED, "DISK", "Vela on partition 0: [Errno"),
    ("vela", "interrupt", RETRIED, "INTERRUPT", "Vela on partition 0: KeyboardInterrupt"),
    ("vela", "time limit", RETRIED, "TIME", "Vela was still compiling partition 0"),
    # another Vela version: its own `vela` command
    ("other vela", "refusal", RECORDED, "REFUSED", "Vela 9.0.0 cannot compile "),
    ("other vela", "native crash", RECORDED, "CRASH", "Vela 9.0.0 crashed (SIGSEGV) compiling partition 0"),
    ("other vela", "SIGKILL", RETRIED, "MEMORY", "Vela on partition 0: was killed (SIGKILL), most likely for memory"),
    ("other vela", "MemoryError", RETRIED, "MEMORY", "MemoryError"),
    ("other vela", "ENOSPC", RETRIED, "DISK", "No space left on device"),
    # what Vela refused kept on the CPU, then the lowering again
    ("fallback", "model error", RECORDED, "REFUSED", "falling back did not work: with "),
    ("fallback", "MemoryError", RETRIED, "MEMORY", "MemoryError"),
    ("fallback", "SIGKILL", RETRIED, "MEMORY", "ExecuTorch's Arm lowering was killed (SIGKILL) while partitioning"),
    # the TOSA reference model, in a fork of the verify job
    ("verify", "model error", RECORDED, "TOOL", "the TOSA reference model: a model error"),
    ("verify", "native crash", RECORDED, "CRASH", "the TOSA reference model crashed (SIGSEGV) running partition 0 on"),
    ("verify", "SIGKILL", RETRIED, "MEMORY", "the TOSA reference model was killed (SIGKILL) running partition 0"),
    ("verify", "MemoryError", RETRIED, "MEMORY", "the TOSA reference model: "),
    ("verify", "ENOSPC", RETRIED, "DISK", "the TOSA reference model: [Errno"),
    # ExecuTorch's Cortex-M lowering of a CPU-only cell
    ("cpu lowering", "model error", RECORDED, "TOOL", "Cortex-M lowering (cortex-m55, int8) failed: ValueError"),
    ("cpu lowering", "native crash", RECORDED, "CRASH", "ExecuTorch's Cortex-M lowering crashed (SIGSEGV)"),
    ("cpu lowering", "MemoryError", RETRIED, "MEMORY", "MemoryError"),
    ("cpu lowering", "ENOSPC", RETRIED, "DISK", "OSError"),
    # the firmware's build, and the simulators
    (
        "firmware build",
        "model error",
        RECORDED,
        "TOOL",
        "building the runner failed (2): main.c:3: error: 'x' undeclared",
    ),
    ("firmware build", "ENOSPC", RETRIED, "DISK", "No space left on device"),
    ("firmware build", "SIGKILL", RETRIED, "MEMORY", "building the runner failed (-9)"),
    # the kernel killing a real compiler for memory: GCC's driver says so and exits 1
    ("firmware build", "compiler killed", RETRIED, "MEMORY", "Killed signal terminated program cc1"),
    ("qemu", "model error", RECORDED, "TOOL", "the runner failed in QEMU: kernel 'aten::exp.out' not found"),
    ("qemu", "time limit", RETRIED, "TIME", "QEMU did not finish within 1 s"),
    ("qemu", "native crash", RECORDED, "CRASH", "the runner failed in QEMU: exit code -11"),
    # a program not installed (any more) on this machine: the machine's, retried once it is there
    ("qemu", "tool missing", RETRIED, "MISSING_TOOL", "No such file or directory"),
    ("fvp", "model error", RECORDED, "TOOL", "FVP run failed: E [executorch:x] Method loading failed (exit 0"),
    ("fvp", "time limit", RETRIED, "TIME", "FVP run stopped at its time limit of 1 s"),
    # another Vela version's environment, made from the package registry
    ("install vela", "missing version", RECORDED, "MISSING_VERSION", "there is no version of ethos-u-vela==9.9.9"),
    ("install vela", "registry outage", RETRIED, "NETWORK", "Failed to fetch"),
    ("install vela", "tool missing", RETRIED, "MISSING_TOOL", "uv is needed to make environments"),
    # the end of the run: never recorded
    *(
        (stage, fault, FAILS, "", "")
        for stage in ("summary", "operator map", "plots", "report")
        for fault in ("model error", "MemoryError")
    ),
]


@pytest.fixture(scope="module")
def lowered(tmp_path_factory) -> Path:
    """tests/models/faulty.py, fault-free, exported, quantized (int8) and lowered for Ethos-U55: the
    inputs of the stages after export."""
    from ethosweep.verify import chain

    folder = tmp_path_factory.mktemp("faulty")
    shutil.copytree(REPO / "tests", folder / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    model = {"name": "faulty", "file": "tests/models/faulty.py"}
    chain.export(folder, model)
    chain.quantize(folder, "faulty")
    chain.lower(folder, "faulty")
    return folder


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
    """A 256 KiB filesystem to fill (ENOSPC), where this machine lets the tests mount one; else
    tests/faults.py falls back to a file size limit (EFBIG)."""
    folder = tmp_path_factory.mktemp("full")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True)
    yield str(folder) if mounted.returncode == 0 else ""
    if mounted.returncode == 0:
        subprocess.run(["umount", str(folder)], capture_output=True)


def request(folder: Path, ref: str, items: dict, minutes: float = 5.0) -> dict:
    """A job as ethosweep.runtime.jobs hands it to the job runner: its named items, bound to the
    stage's parameters by name as a rule's are (ethosweep.runtime.binding)."""
    return {
        "steps": [{"ref": ref, "kwargs": {}, "job": {"params": items}}],
        "log": str(folder / "job.log"),
        "label": ref,
        "rule": ref.rpartition(":")[2],
        "threads": 1,
        "resources": {"runtime": minutes, "mem_mb": 1000},
    }


def fake_tool(folder: Path, name: str, body: str) -> str:
    """An executable shell script standing in for a tool (a `vela`, a compiler, QEMU, an FVP)."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


# What the fakes print and do, as the real tools do when that happens to them.
FAKE = {
    "refusal": f'echo "RuntimeError: {REFUSED}"; exit 1',
    "native crash": "kill -SEGV $$",
    "SIGKILL": "kill -KILL $$",
    "MemoryError": 'echo "Traceback (most recent call last):"; echo "  File x"; echo "MemoryError"; exit 1',
    "ENOSPC": "echo \"OSError: [Errno 28] No space left on device: 'out.bin'\"; exit 1",
    "model error": "echo \"main.c:3: error: 'x' undeclared\"; exit 2",
    # a real gcc whose cc1 is killed (SIGKILL, as the kernel's out-of-memory killer does) while it
    # compiles, in a folder of its own so that nothing is left in the test's working folder
    "compiler killed": """
        cd "$(mktemp -d)"
        python3 -c "print(''.join(f'int f{i}(int x){{return x*{i};}}\\n' for i in range(4000)))" > big.c
        gcc -O2 -c big.c -o big.o &
        gcc_pid=$!
        while ! pkill -KILL -P $gcc_pid cc1 2>/dev/null; do sleep 0.02; done
        wait $gcc_pid; rc=$?
        rm -rf "$PWD"; exit $rc
    """,
}


def seam(monkeypatch, module: str, name: str, fault_at_call=None):
    """Make `module.name` do the active fault first (or `fault_at_call()`), then what it does."""
    import importlib

    target = importlib.import_module(module)
    original = getattr(target, name)

    def faulty(*args, **kwargs):
        (fault_at_call or faults.inject)()
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, faulty)


def refuses_convolutions(monkeypatch) -> None:
    """Vela refuses every TOSA graph with a CONV2D, as Vela refuses int16 convolutions on Ethos-U55:
    the search finds the convolution, and the lowering that keeps it on the CPU compiles."""
    from ethosweep.compile.tosa_graph import loaded
    from ethosweep.vela import partitions

    original = partitions._vela_in_child

    def vela(tosa, *args):
        with loaded(tosa) as (_, block):
            if any(str(op.op) == "Op.CONV2D" for op in block.operators):
                raise RuntimeError(REFUSED)
        return original(tosa, *args)

    monkeypatch.setattr(partitions, "_vela_in_child", vela)


def refuse() -> None:
    if faults.active() == "refusal":
        raise RuntimeError(REFUSED)
    faults.inject()


def job_of(stage: str, fault: str, folder: Path, lowered: Path, monkeypatch) -> dict:
    """The job that runs `stage` with its seam armed for `fault` (the fault itself waits for the
    environment: see tests/faults.py)."""
    model = {"name": "faulty", "file": "tests/models/faulty.py"}
    minutes = 0.03 if faults.active() == "time limit" else 5.0
    if fault == "ethosweep bug":  # an input spec without its dtype, which ethosweep always writes
        model = {"name": "faulty", "import": "torch.nn:Identity", "inputs": [{"shape": [1]}]}
    if fault == "zoo builder bug":  # a keyword spotter of a kind ethosweep's builder does not know
        inputs = [{"shape": [1, 1, 49, 10], "dtype": "float32", "range": [-1, 1]}]
        model = {"name": "faulty", "import": "ethosweep.zoo.deployable:recurrent_kws", "kwargs": {"cell": "rnn"}}
        model["inputs"] = inputs
    if stage in ("export", "import"):
        monkeypatch.setenv("ETHOSWEEP_TEST_FAULT_AT", "import" if stage == "import" else "forward")
        return request(
            folder,
            "ethosweep.compile.export:export_model",
            dict(
                model=model, seed=0, base_dir=str(lowered), **outputs(folder, "program", "inputs", "reference", "meta")
            ),
            minutes,
        )
    if stage == "train":
        monkeypatch.setenv("ETHOSWEEP_TEST_FAULT_AT", "forward")
        return request(
            folder,
            "ethosweep.zoo.train:train_model",
            dict(
                model=model,
                seed=0,
                dataset="digits",
                train={"epochs": 1, "lr": 0.01, "batch_size": 64},
                base_dir=str(lowered),
                **outputs(folder, "weights", "meta"),
            ),
            minutes,
        )
    if stage == "quantize":
        seam(monkeypatch, "ethosweep.compile.quantize", "calibrate")
        return request(
            folder,
            "ethosweep.compile.quantize:quantize_model",
            dict(
                program=str(lowered / "program.pt2"),
                inputs=str(lowered / "inputs.pt"),
                quant="int8",
                tosa_profile="u55",
                **outputs(folder, "quantized", "meta"),
            ),
            minutes,
        )
    if stage == "lower":
        seam(monkeypatch, "ethosweep.compile.delegation", "lower_to_edge")
        return request(
            folder,
            "ethosweep.compile.lower:lower_to_tosa",
            dict(
                quantized=str(lowered / "faulty.pt2"),
                tosa_profile="u55",
                tosa_dir=str(folder / "tosa"),
                **outputs(folder, "template", "edge", "delegation", "tosa_sources", "meta"),
            ),
            minutes,
        )
    if stage in ("vela", "other vela", "fallback"):
        cell = dict(
            template=str(lowered / "faulty_lowered/template.pte"),
            lower_meta=str(lowered / "faulty_lowered/lower.json"),
            tosa_sources=str(lowered / "faulty_lowered/tosa_sources.json"),
            model="faulty",
            quant="int8",
            target="ethos-u55-128",
            system_config="Ethos_U55_High_End_Embedded",
            memory_mode="Shared_Sram",
            vela={},
            repro=str(folder / "repro"),
            quantized=str(lowered / "faulty.pt2"),
            profile="u55",
            **outputs(folder, "pte", "summary", "per_layer", "meta"),
        )
        if stage == "vela":
            seam(monkeypatch, "ethosweep.vela.partitions", "_vela_in_child", refuse)
            cell["fallback"] = False  # the fallback has rows of its own
        elif stage == "fallback":  # Vela refuses the partition, then the lowering that keeps it on the CPU fails
            # a copy of its own: a fallback's lowering is kept beside the quantized program once it
            # worked (a row's run without its fault), and a lowering taken from there meets no fault
            shutil.copy(lowered / "faulty.pt2", folder / "faulty.pt2")
            cell["quantized"] = str(folder / "faulty.pt2")
            refuses_convolutions(monkeypatch)
            seam(monkeypatch, "ethosweep.compile.delegation", "lower_to_edge")
        else:  # another version's command: the fault as that tool shows it; once gone, a Vela that works
            installed = shutil.which("vela", path=str(Path(sys.executable).parent)) or "vela"
            vela = fake_tool(folder, "vela", FAKE[fault] if faults.active() else f'exec {installed} "$@"')
            environment = {"version": "9.0.0", "vela": vela, "lock_sha256": "", "packages": {}}
            (folder / "env.json").write_text(json.dumps(environment))
            cell.update(vela_version="9.0.0", vela_env=str(folder / "env.json"), fallback=False)
        return request(folder, "ethosweep.vela.compile:compile_cell", cell, minutes)
    if stage == "verify":
        seam(monkeypatch, "ethosweep.verify.reference", "run_tosa")
        return request(
            folder,
            "ethosweep.verify.numerics:verify_numerics",
            dict(
                program=str(lowered / "program.pt2"),
                quantized=str(lowered / "faulty.pt2"),
                inputs=str(lowered / "inputs.pt"),
                edge=str(lowered / "faulty_lowered/edge.pt2"),
                lower_meta=str(lowered / "faulty_lowered/lower.json"),
                tosa_sources=str(lowered / "faulty_lowered/tosa_sources.json"),
                repro=str(folder / "repro"),
                random_samples=8,
                **outputs(folder, "report", "bundle_io"),
            ),
            minutes,
        )
    if stage == "cpu lowering":
        seam(monkeypatch, "ethosweep.compile.cortex_m", "lower_for_cortex_m")
        return request(
            folder,
            "ethosweep.compile.cortex_m:lower_cpu_cell",
            dict(
                program=str(lowered / "program.pt2"),
                inputs=str(lowered / "inputs.pt"),
                cpu="cortex-m55",
                quant="int8",
                **outputs(folder, "pte", "run_inputs", "reference", "meta"),
            ),
            minutes,
        )
    if stage == "firmware build":
        built = 'out="${1#--output=}"; mkdir -p "$out" && : > "$out/arm_executor_runner"'
        build = fake_tool(folder, "build.sh", FAKE[fault] if faults.active() else built)
        (folder / "plan.json").write_text(json.dumps({"build_command": [build, f"--output={folder}/out"], "pools": {}}))
        return request(
            folder,
            "ethosweep.firmware.arm_runner:build_executor_runner",
            dict(plan=str(folder / "plan.json"), **outputs(folder, "elf", "sizes")),
        )
    if stage == "qemu":
        body = {
            "time limit": "sleep 30",
            "model error": "echo \"ethosweep-runner: error: kernel 'aten::exp.out' not found\"; exit 1",
            "native crash": "kill -SEGV $$",
        }
        qemu = fake_tool(folder, "qemu", body.get(fault, "") if faults.active() else 'echo "ethosweep-runner: done"')
        if fault == "tool missing" and faults.active():
            qemu = str(folder / "not-installed" / "qemu-system-arm")
        for name in ("elf", "pte", "run_inputs"):
            (folder / name).write_bytes(b"\0")
        import torch

        torch.save({"expected": [], "float": [], "scales": (), "label": None}, folder / "reference.pt")
        return request(
            folder,
            "ethosweep.firmware.qemu:qemu_cell",
            dict(
                elf=str(folder / "elf"),
                pte=str(folder / "pte"),
                run_inputs=str(folder / "run_inputs"),
                reference=str(folder / "reference.pt"),
                timelimit=1,
                qemu=qemu,
                **outputs(folder, "run", "console"),
            ),
        )
    if stage == "fvp":
        body = {
            "time limit": "sleep 1; echo 'Info: Simulation is stopping.'",
            "model error": "echo 'E [executorch:x] Method loading failed'",
        }
        fvp = fake_tool(folder, "fvp", body[fault] if faults.active() else "echo 'Program complete, exiting.'")
        (folder / "plan.json").write_text(json.dumps({"fvp_path": fvp}))
        return request(
            folder,
            "ethosweep.firmware.arm_runner:run_on_fvp",
            dict(
                target="ethos-u55-128",
                elf=fvp,
                program=fvp,
                plan=str(folder / "plan.json"),
                timelimit_s=1,
                **outputs(folder, "run", "uart"),
            ),
        )
    if stage == "install vela":
        index = {
            "missing version": "file://" + str(_empty_index(folder)),
            "registry outage": "http://127.0.0.1:9/simple",
        }
        monkeypatch.setenv("UV_INDEX_URL", index.get(fault if faults.active() else "", index["missing version"]))
        monkeypatch.setenv("UV_HTTP_RETRIES", "0")
        monkeypatch.setenv("UV_NO_CACHE", "1")
        if fault == "tool missing":  # run without `uv run`, on a machine without uv
            monkeypatch.delenv("UV", raising=False)
            monkeypatch.setenv("PATH", str(folder / "bin"))
        version = "9.9.9" if faults.active() else "0.0.0"  # the fault gone: not tried (no registry here)
        return request(
            folder,
            "ethosweep.vela.environment:create_environment",
            dict(
                vela_version=version,
                venv=str(folder / "venv"),
                lock=str(folder / "requirements.txt"),
                env=str(folder / "env.json"),
            ),
        )
    raise AssertionError(stage)


def outputs(folder: Path, *names: str) -> dict:
    return {name: str(folder / "out" / name) for name in names}


def _empty_index(folder: Path) -> Path:
    """A package index with no release of ethos-u-vela: what the registry answers for a version it
    does not have."""
    index = folder / "index"
    (index / "ethos-u-vela").mkdir(parents=True, exist_ok=True)
    (index / "ethos-u-vela" / "index.html").write_text("<html><body></body></html>")
    return index


# ---- the matrix ---------------------------------------------------------------------------------


STAGE_ROWS = [row for row in CONTRACT if row[2] != FAILS]


@pytest.mark.parametrize(
    ("stage", "fault", "outcome", "cause", "words"), STAGE_ROWS, ids=[f"{r[0]}-{r[1]}" for r in STAGE_ROWS]
)
def test_a_stage_fault_ends_as_the_contract_says(
    stage, fault, outcome, cause, words, lowered, full_disk, tmp_path, monkeypatch
):
    from ethosweep.runtime.execute import execute

    (tmp_path / "out").mkdir()
    monkeypatch.setenv(faults.FULL_DISK_ENV, full_disk)
    monkeypatch.setenv(faults.ENV, fault)
    ended = execute(job_of(stage, fault, tmp_path, lowered, monkeypatch))
    assert not ended["ok"], ended
    assert (ended["recorded"], ended["fault"]) == (outcome == RECORDED, cause), ended
    assert words in ended["reason"], ended["reason"]
    if cause == "CRASH" and stage not in ("vela", "other vela", "verify"):
        assert CRASH_TWICE in ended["reason"]  # the job runner's second try, in a fresh process
    if fault == "native crash" and stage not in ("other vela", "qemu"):  # (their own programs crash there)
        # the crash's Python stack is in the job's log, not on the terminal of whoever ran the job
        log = (tmp_path / "job.log").read_text()
        assert "Fatal Python error: Segmentation fault" in log and "in inject" in log, log[-3000:]
    if outcome == RETRIED:
        # once the fault is gone the same job completes: what the next plain run does
        monkeypatch.delenv(faults.ENV)
        if stage in ("install vela",):
            return  # making an environment needs the registry itself: test_failures.py runs it for real
        again = execute(job_of(stage, fault, tmp_path, lowered, monkeypatch))
        assert again["ok"], again


def test_a_vela_crash_keeps_its_signal_when_the_search_for_the_operator_fails(lowered, tmp_path, monkeypatch):
    """The search for what Vela refuses reads the TOSA with the serializer's binding, which can fail
    on a graph (a held-out model: 'Unable to convert function return value to a Python type'): the
    cell keeps Vela's crash, its signal and its reproducer, and one line says why the search stopped."""
    from ethosweep.runtime.execute import execute

    (tmp_path / "out").mkdir()
    monkeypatch.setenv(faults.ENV, "native crash")

    def unreadable(tosa, *args):
        raise TypeError("Unable to convert function return value to a Python type!")

    monkeypatch.setattr("ethosweep.vela.refusals.units", unreadable)
    ended = execute(job_of("vela", "native crash", tmp_path, lowered, monkeypatch))
    assert (ended["recorded"], ended["fault"]) == (True, "CRASH")
    assert ended["reason"].startswith("Vela crashed (SIGSEGV) compiling partition 0 for ethos-u55-128 / Shared_Sram")
    assert (
        "the search for the operator it refuses stopped: the search for refused operators: Unable to convert"
        in (ended["reason"])
    )
    assert (tmp_path / "repro" / "partition_0.tosa").exists() and ended["reproducer"] == f"{tmp_path}/repro/"


def test_a_reference_model_crash_leaves_a_reproducer_that_reproduces_the_inputs(lowered, tmp_path, monkeypatch):
    from ethosweep.runtime.execute import execute

    (tmp_path / "out").mkdir()
    monkeypatch.setenv(faults.ENV, "native crash")
    ended = execute(job_of("verify", "native crash", tmp_path, lowered, monkeypatch))
    assert ended["reason"] == (
        "the TOSA reference model crashed (SIGSEGV) running partition 0 on sample 0, twice in fresh processes"
    )
    repro = Path(ended["reproducer"])
    assert sorted(p.name for p in repro.iterdir()) == ["README.txt", "input_0.npy", "partition_0.tosa", "run.py"]
    # without the fault, the reproducer's script runs the partition on those inputs
    ran = subprocess.run(
        ["uv", "run", "--project", str(REPO), "python", "run.py"],
        cwd=repro,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != faults.ENV},
    )
    assert ran.returncode == 0 and "TOSA_VALID" in ran.stdout, ran.stderr[-2000:]


@pytest.mark.parametrize(("stage", "fault"), [(r[0], r[1]) for r in CONTRACT if r[2] == FAILS])
def test_an_end_of_run_job_fails_whatever_stops_it(stage, fault, tmp_path, monkeypatch):
    """The summary, the operator map, the plots and the report describe every cell or fail as jobs:
    never a failure record in their place, whatever the cause."""
    from ethosweep.runtime.jobs import run_stages
    from ethosweep.runtime.outcome import failure_of

    output = tmp_path / "results" / f"{stage}.out"
    output.parent.mkdir()
    smk = SimpleNamespace(
        rule=stage.replace(" ", "_"),
        wildcards={},
        log=[str(tmp_path / "logs" / f"{stage}.log")],
        threads=1,
        resources={"runtime": 5, "mem_mb": 1000},
        input=[],
        output=[str(output)],
    )
    monkeypatch.setenv("ETHOSWEEP_WORKER", "0")
    with pytest.raises(SystemExit) as failed:
        run_stages(smk, ("faults:inject", {"fault": fault}), aggregate=True)
    assert failed.value.code == 1 and not output.exists() and failure_of(output) is None


def test_a_machine_fault_that_recurs_three_runs_in_a_row_is_recorded(tmp_path, monkeypatch):
    """Memory that never suffices (torch's allocator failing the same way on every run) fails the job
    twice, to be retried; the third run in a row records it, saying what to change, so the run still
    ends in its summary and report. A success, or another key, starts the count over."""
    from ethosweep.runtime.jobs import run_stages
    from ethosweep.runtime.outcome import failure_of

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ETHOSWEEP_WORKER", "0")
    output = tmp_path / "results" / "export" / "out.pt2"
    output.parent.mkdir(parents=True)

    def run(fault: str | None, code: str = "v1"):
        smk = SimpleNamespace(
            rule="export_model",
            wildcards={"model": "m"},
            log=[str(tmp_path / "logs" / "export" / "m.log")],
            threads=1,
            resources={"runtime": 5, "mem_mb": 1000},
            input=[],
            output=[str(output)],
            params={},
        )
        job = {"input": {}, "output": {"out": str(output)}, "params": {"code": code}, "wildcards": {"model": "m"}}
        steps = [("faults:inject", {"fault": fault})] if fault else [("faults:inject", {"fault": "exit"})]
        return run_stages(smk, *steps, job=job)

    for _ in range(2):
        with pytest.raises(SystemExit):
            run("torch allocator")
    run("torch allocator")  # the third in a row: recorded, the job succeeds
    record = failure_of(output)
    assert record is not None and record["reason"].startswith("ran out of memory 3 times in a row (")
    assert "(--set-resources export_model:mem_mb=<MB>), then retry it with --forcerun" in record["reason"]
    # another key (the code changed): counted from the start again
    output.unlink()
    with pytest.raises(SystemExit):
        run("torch allocator", code="v2")
    assert failure_of(output) is None


def test_every_end_of_run_rule_says_it_is_one():
    """What makes an end-of-run job fail instead of recording: `aggregate=True` in its rule's params."""
    rules = "".join(path.read_text() for path in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    for rule in ("summarize_sweep", "summarize_cpu", "map_operators", "report_cells", "report_plots", "report_index"):
        body = re.search(rf"^rule {rule}:\n(.*?)(?=^\S|\Z)", rules, re.S | re.M).group(1)
        assert re.search(r"^\s+aggregate=True,$", body, re.M), rule


def test_a_failure_record_is_never_rendered_as_a_plot(tmp_path):
    from ethosweep.results.report.figures import read_plot
    from ethosweep.runtime.errors import StageError
    from ethosweep.runtime.outcome import failure_record, write_failure

    plot = tmp_path / "cycles.svg"
    write_failure(failure_record("report", "a model error", "logs/x.log", "report_plots", str(plot)), [str(plot)])
    with pytest.raises(StageError, match="holds a failure record, not a plot"):
        read_plot(str(plot))


def test_the_docs_show_this_table():
    """docs/failures.md's table lists every (stage, fault) row of the contract with its outcome."""
    text = (REPO / "docs" / "failures.md").read_text()
    for stage, fault, outcome, _, _ in CONTRACT:
        assert f"| {stage} | {fault} | {outcome} |" in text, (stage, fault)


def test_a_program_that_cannot_be_started_is_the_machines_a_file_that_is_not_there_the_inputs(tmp_path):
    """Both are FileNotFoundError: a program missing on this machine is retried once it is installed
    (a rerun with `uv run`, after `apt-get install`), a file the model or its input names is kept."""
    from ethosweep.runtime.errors import Fault, fault_of, kept

    with pytest.raises(FileNotFoundError) as program:
        subprocess.run([str(tmp_path / "qemu-system-arm")])
    with pytest.raises(FileNotFoundError) as data:
        open(tmp_path / "weights.pt", "rb")
    assert fault_of(program.value) is Fault.MISSING_TOOL and not kept(Fault.MISSING_TOOL)
    assert fault_of(data.value) is Fault.TOOL and kept(fault_of(data.value))
