from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.compile.cortex_m:lower_cpu_cell",
    program=snakemake.input.program,
    inputs=snakemake.input.inputs,
    cpu=snakemake.wildcards.cpu,
    scheme=snakemake.wildcards.quant,
    pte=snakemake.output.pte,
    run_inputs=snakemake.output.run_inputs,
    reference=snakemake.output.reference,
    meta=snakemake.output.meta,
    dataset=snakemake.params.dataset,
    calibration_samples=snakemake.params.calibration_samples,
    seed=snakemake.params.seed,
)
