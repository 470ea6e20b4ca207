# One quantized program per model, scheme and TOSA profile (u55: Ethos-U55 and -U65,
# u85: Ethos-U85), shared by every cell with that profile; the u85 one is the u55 one's wherever
# the quantizer annotates the same graph for both: see ethosweep/compile/quantize.py.
rule quantize_model:
    input:
        # u85: the u55 profile's program and record (same_as_quantized, same_as_meta), read even
        # when they are a failure record (then this profile quantizes on its own)
        unpack(quantization_to_share),
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        dataset_files=model_dataset_files,
    output:
        quantized="results/quantize/{model}/{quant}/{tosa_profile}/quantized.pt2",
        meta="results/quantize/{model}/{quant}/{tosa_profile}/quantize.json",
    log:
        "logs/quantize/{model}/{quant}/{tosa_profile}.log",
    benchmark:
        "benchmarks/quantize/{model}/{quant}/{tosa_profile}.tsv"
    priority: PRIORITY["quantize"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        # peak RSS over the deployed zoo's 240 quantizations: at most 1.4 GiB (docs/performance.md)
        mem_mb=2000,
    params:
        stage="ethosweep.compile.quantize:quantize_model",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        reads_failures=["same_as_quantized", "same_as_meta"],
        dataset=model_dataset,
        calibration_samples=numerics("calibration_samples"),
        seed=SWEEP.seed,
        tools=stage_versions("ethosweep.compile.quantize"),
        code=code_version("ethosweep.compile.quantize"),
    script:
        "../scripts/stage.py"
