from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.verify.numerics:verify_numerics",
    reads_failures=[name for name in snakemake.input.keys() if name.startswith("same_as_")],
    program=snakemake.input.program,
    quantized=snakemake.input.quantized,
    inputs=snakemake.input.inputs,
    edge=snakemake.input.edge,
    lower_meta=snakemake.input.lower_meta,
    tosa_sources=snakemake.input.tosa_sources,
    report=snakemake.output.report,
    bundle_io=snakemake.output.bundle_io,
    repro=snakemake.params.repro,
    **snakemake.params.settings,
    quantize_meta=snakemake.input.get("quantize_meta"),
    delegation=snakemake.input.get("delegation"),
    same_as={
        name.removeprefix("same_as_"): path for name, path in snakemake.input.items() if name.startswith("same_as_")
    },
)
