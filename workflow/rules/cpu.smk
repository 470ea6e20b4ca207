# CPU-only cells (config `cpu_targets`): each model for a Cortex-M CPU alone with ExecuTorch's
# Cortex-M backend (CMSIS-NN kernels), the baseline the NPU cells are judged by. Lowering always
# runs; the firmware (ExecuTorch built once per CPU, one runner ELF per cell on ethosweep's
# mps3-an547 platform layer) and the QEMU run enter the DAG only where SDK.cpu_firmware_ready()
# and QEMU is found, and results/cpu/summary.csv says per cell what is missing.
CPU_CELL = "{model}/{quant}/{cpu}"


rule lower_cpu:
    input:
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        dataset_files=model_dataset_files,
    output:
        pte=f"results/cpu/{CPU_CELL}/model.pte",
        run_inputs=f"results/cpu/{CPU_CELL}/run_inputs.bin",
        reference=f"results/cpu/{CPU_CELL}/reference.pt",
        meta=f"results/cpu/{CPU_CELL}/lower.json",
    log:
        f"logs/cpu/{CPU_CELL}/lower.log",
    benchmark:
        f"benchmarks/cpu/{CPU_CELL}/lower.tsv"
    priority: PRIORITY["lower"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        stage="ethosweep.compile.cortex_m:lower_cpu_cell",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        dataset=model_dataset,
        calibration_samples=numerics("calibration_samples"),
        seed=SWEEP.seed,
        tools=stage_versions("ethosweep.compile.cortex_m"),
        code=code_version("ethosweep.compile.cortex_m"),
    script:
        "../scripts/stage.py"


rule build_executorch_cpu:
    input:
        sdk="results/firmware/sdk.json",
    output:
        install_dir=directory("results/firmware/executorch/{cpu}/install"),
        meta="results/firmware/executorch/{cpu}/build.json",
    log:
        "logs/firmware/executorch/{cpu}.log",
    benchmark:
        "benchmarks/firmware/executorch/{cpu}.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 8
    resources:
        mem_mb=4000,
    params:
        stage="ethosweep.firmware.own_runner:build_executorch",
        executorch_src=SDK.components["executorch_src"].path,
        cmsis_nn=sdk_path("cmsis_nn_src"),
        # a parallel CMake build; Snakemake gives it at most --cores (not workflow.cores: commands
        # without --cores, such as --unlock and --report, must still parse)
        tools=stage_versions("ethosweep.firmware.own_runner"),
        code=code_version("ethosweep.firmware.own_runner"),
    script:
        "../scripts/stage.py"


rule build_cpu_runner:
    input:
        install_dir="results/firmware/executorch/{cpu}/install",
        pte=f"results/cpu/{CPU_CELL}/model.pte",
        lower_meta=f"results/cpu/{CPU_CELL}/lower.json",
    output:
        elf=ensure(f"results/cpu/{CPU_CELL}/runner.elf", non_empty=True),
        firmware=f"results/cpu/{CPU_CELL}/firmware.json",
    log:
        f"logs/cpu/{CPU_CELL}/firmware.log",
    benchmark:
        f"benchmarks/cpu/{CPU_CELL}/firmware.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1500,
    params:
        stage="ethosweep.firmware.own_runner:build_cell_runner",
        executorch_src=SDK.components["executorch_src"].path,
        tools=stage_versions("ethosweep.firmware.own_runner"),
        code=code_version("ethosweep.firmware.own_runner"),
    script:
        "../scripts/stage.py"


rule run_qemu:
    input:
        elf=f"results/cpu/{CPU_CELL}/runner.elf",
        pte=f"results/cpu/{CPU_CELL}/model.pte",
        run_inputs=f"results/cpu/{CPU_CELL}/run_inputs.bin",
        reference=f"results/cpu/{CPU_CELL}/reference.pt",
    output:
        run=f"results/cpu/{CPU_CELL}/qemu.json",
        console=f"results/cpu/{CPU_CELL}/qemu.log",
    log:
        f"logs/cpu/{CPU_CELL}/qemu.log",
    benchmark:
        f"benchmarks/cpu/{CPU_CELL}/qemu.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        # `--resources qemu=N` bounds the emulators running at once
        qemu=1,
    params:
        stage="ethosweep.firmware.qemu:qemu_cell",
        qemu=SDK.components["qemu"].path,
        timelimit=config.get("sdk", {}).get("qemu_timelimit", 300),
        tools=stage_versions("ethosweep.firmware.qemu"),
        code=code_version("ethosweep.firmware.qemu"),
    script:
        "../scripts/stage.py"


rule summarize_cpu:
    input:
        meta=cpu_cell_paths(f"results/cpu/{CPU_CELL}/lower.json"),
        firmware=cpu_cell_paths(f"results/cpu/{CPU_CELL}/firmware.json") if SDK.cpu_firmware_ready() else [],
        qemu=cpu_cell_paths(f"results/cpu/{CPU_CELL}/qemu.json") if cpu_qemu_ready() else [],
    output:
        summary=CPU_SUMMARY,
    log:
        "logs/cpu/summary.log",
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.cpu_summary:summarize",
        aggregate=True,
        cells=[{"model": c.model, "quant": c.quant, "cpu": c.cpu} for c in SWEEP.cpu_cells],
        firmware_state=SDK.cpu_firmware_line(),
        qemu_state=SDK.qemu_line(),
        tools=stage_versions("ethosweep.results.cpu_summary"),
        code=code_version("ethosweep.results.cpu_summary"),
    script:
        "../scripts/stage.py"
