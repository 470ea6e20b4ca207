from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.compile.quantize:quantize_model",
    reads_failures=("same_as_quantized", "same_as_meta"),
    program=snakemake.input.program,
    inputs=snakemake.input.inputs,
    scheme=snakemake.wildcards.quant,
    profile=snakemake.wildcards.tosa_profile,
    quantized=snakemake.output.quantized,
    meta=snakemake.output.meta,
    dataset=snakemake.params.dataset,
    calibration_samples=snakemake.params.calibration_samples,
    seed=snakemake.params.seed,
    same_as_quantized=snakemake.input.get("same_as_quantized"),
    same_as_meta=snakemake.input.get("same_as_meta"),
)
