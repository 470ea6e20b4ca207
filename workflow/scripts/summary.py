from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.summary:summarize",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    cells=snakemake.params.cells,
    compile_meta=list(snakemake.input.compile_meta),
    delegation=list(snakemake.input.delegation),
    vela_summary=list(snakemake.input.vela_summary),
    pte=list(snakemake.input.pte),
    header=list(snakemake.input.header),
    verify_report=list(snakemake.input.verify_report),
    fallback_report=list(snakemake.input.fallback_report),
    firmware_plan=list(snakemake.input.firmware_plan),
    fvp_run=dict(zip(snakemake.params.fvp_cells, snakemake.input.fvp_run, strict=True)),
    npu_runner=dict(zip(snakemake.params.npu_runner_cells, snakemake.input.npu_runner, strict=True)),
    npu_runner_state=snakemake.params.npu_runner_state,
    summary=snakemake.output.summary,
)
