# Firmware and simulator: one semihosting runner per (target, system config, memory mode),
# its pools sized from the .pte of every cell it serves, then each cell on the Corstone FVP.
# The plan is written everywhere; build and run jobs exist only where SDK.firmware_ready()
# and the FVP are found (ethosweep.firmware.sdk), and the summary says per cell what is missing.


rule check_sdk:
    output:
        check="results/firmware/sdk.json",
    log:
        "logs/firmware/check_sdk.log",
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.firmware.sdk:write_check",
        # found at parse time (filesystem and PATH): a part appearing or going reruns this
        sdk_status=SDK.as_json(),
        text=format_sdk_status(SDK),
        tools=stage_versions("ethosweep.firmware.sdk"),
        code=code_version("ethosweep.firmware.sdk"),
    script:
        "../scripts/stage.py"


# It only reads the cells' JSON records (a fraction of a second): on a cluster a job of its own per
# configuration would cost more in queueing and Snakemake starts than it does
rule plan_firmware:
    input:
        sdk="results/firmware/sdk.json",
        # the pools are sized from the records (the Vela job's scratch and buffers, the inputs' bytes)
        compile_meta=runner_cell_paths(f"{COMPILED}/compile.json"),
        export_meta=runner_cell_paths("results/export/{model}/export.json"),
    output:
        plan=f"results/firmware/{RUNNER}/plan.json",
    log:
        f"logs/firmware/{RUNNER}/plan.log",
    benchmark:
        f"benchmarks/firmware/{RUNNER}/plan.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1500,
    params:
        stage="ethosweep.firmware.arm_runner:plan_runner",
        aggregate=True,
        cells=lambda wildcards: [c.id for c in runner_cells(wildcards)],
        sdk_config=config.get("sdk", {}),
        bundleio=numerics("bundleio"),
        tools=stage_versions("ethosweep.firmware.arm_runner"),
        code=code_version("ethosweep.firmware.arm_runner"),
    script:
        "../scripts/stage.py"


rule build_firmware:
    input:
        plan=f"results/firmware/{RUNNER}/plan.json",
    output:
        elf=ensure(f"results/firmware/{RUNNER}/arm_executor_runner", non_empty=True),
        sizes=f"results/firmware/{RUNNER}/sizes.json",
    log:
        f"logs/firmware/{RUNNER}/build.log",
    benchmark:
        f"benchmarks/firmware/{RUNNER}/build.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 2
    resources:
        mem_mb=3000,
    params:
        stage="ethosweep.firmware.arm_runner:build_executor_runner",
        tools=stage_versions("ethosweep.firmware.arm_runner"),
        code=code_version("ethosweep.firmware.arm_runner"),
    script:
        "../scripts/stage.py"


rule run_fvp:
    input:
        elf=f"results/firmware/{RUNNER}/arm_executor_runner",
        plan=f"results/firmware/{RUNNER}/plan.json",
        program=fvp_program,
    output:
        run=f"results/run/{CELL}/run.json",
        uart=f"results/run/{CELL}/uart.log",
    log:
        f"logs/run/{CELL}.log",
    benchmark:
        f"benchmarks/run/{CELL}.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        # `--resources fvp=N` bounds the simulators running at once
        fvp=1,
    params:
        stage="ethosweep.firmware.arm_runner:run_on_fvp",
        timelimit_s=config.get("sdk", {}).get("fvp_timelimit", 600),
        tools=stage_versions("ethosweep.firmware.arm_runner"),
        code=code_version("ethosweep.firmware.arm_runner"),
    script:
        "../scripts/stage.py"


# ethosweep's own runner with ExecuTorch's Ethos-U delegate and the Ethos-U core driver, per
# Ethos-U55/U65 cell, on the Corstone-300 memory map (firmware/platform/mps3-an547): links and
# checks the fit where Arm's core_platform is absent; it runs only on the FVP or hardware.
rule link_npu_runner:
    input:
        install_dir="results/firmware/executorch/cortex-m55/install",
        pte=f"{COMPILED}/model.pte",
        compile_meta=f"{COMPILED}/compile.json",
        plan=FIRMWARE_PLAN,
    output:
        elf=ensure(f"{NPU_RUNNER}/runner.elf", non_empty=True),
        firmware=f"{NPU_RUNNER}/firmware.json",
    log:
        f"logs/firmware/cells/{CELL}.log",
    benchmark:
        f"benchmarks/firmware/cells/{CELL}.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1500,
    params:
        stage="ethosweep.firmware.own_runner:build_npu_cell_runner",
        cell=lambda wildcards: cell_of(wildcards).id,
        executorch_src=SDK.components["executorch_src"].path,
        driver=SDK.components["ethos_u_driver"].path,
        cmsis=SDK.components["cmsis"].path,
        tools=stage_versions("ethosweep.firmware.own_runner"),
        code=code_version("ethosweep.firmware.own_runner"),
    script:
        "../scripts/stage.py"
