from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.verify.numerics:verify_fallbacks",
    cells=snakemake.params.cells,
    compile_meta=list(snakemake.input.compile_meta),
    profile=snakemake.wildcards.tosa_profile,
    report=snakemake.output.report,
    program=snakemake.input.program,
    inputs=snakemake.input.inputs,
    quantized=snakemake.input.quantized,
    **snakemake.params.settings,
)
