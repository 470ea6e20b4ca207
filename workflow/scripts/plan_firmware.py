from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.executor_runner:plan_runner",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    target=snakemake.wildcards.target,
    system_config=snakemake.wildcards.system_config,
    memory_mode=snakemake.wildcards.memory_mode,
    cells=snakemake.params.cells,
    compile_meta=list(snakemake.input.compile_meta),
    export_meta=list(snakemake.input.export_meta),
    sdk=snakemake.input.sdk,
    sdk_config=snakemake.params.sdk_config,
    bundleio=snakemake.params.bundleio,
    plan=snakemake.output.plan,
)
