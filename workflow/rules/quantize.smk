# One quantized program per model, scheme and TOSA profile (u55: Ethos-U55 and -U65,
# u85: Ethos-U85), shared by every cell with that profile: see ethosweep/compile/quantize.py.
rule quantize_model:
    input:
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        dataset=model_dataset_files,
    output:
        quantized="results/quantize/{model}/{quant}/{tosa_profile}/quantized.pt2",
        meta="results/quantize/{model}/{quant}/{tosa_profile}/quantize.json",
    log:
        "logs/quantize/{model}/{quant}/{tosa_profile}.log",
    benchmark:
        "benchmarks/quantize/{model}/{quant}/{tosa_profile}.tsv"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        dataset=model_dataset,
        calibration_samples=numerics("calibration_samples"),
        seed=SWEEP.seed,
        tools=stage_versions("ethosweep.compile.quantize"),
        code=code_version("ethosweep.compile.quantize"),
    script:
        "../scripts/quantize.py"
