# Numerics on data: float vs quantized PyTorch vs the TOSA reference model (what the NPU
# computes). One job per model, scheme and TOSA profile: every cell with that profile
# compiles the same TOSA (the summary checks each cell's TOSA sha256 against it).
rule verify_numerics:
    input:
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        quantized="results/quantize/{model}/{quant}/{tosa_profile}/quantized.pt2",
        dataset=model_dataset_files,
    output:
        report="results/verify/{model}/{quant}/{tosa_profile}/verify.json",
        bundle_io="results/verify/{model}/{quant}/{tosa_profile}/bundle_io.pt",
    log:
        "logs/verify/{model}/{quant}/{tosa_profile}.log",
    benchmark:
        "benchmarks/verify/{model}/{quant}/{tosa_profile}.tsv"
    params:
        dataset=model_dataset,
        seed=SWEEP.seed,
        evaluation_samples=numerics("evaluation_samples"),
        random_samples=numerics("random_samples"),
        min_agreement=numerics("min_agreement"),
        max_error_steps=numerics("max_error_steps"),
        bundle_samples=numerics("bundle_samples"),
        code=code_version("ethosweep.verify"),
    threads: 1
    resources:
        mem_mb=2000,
    conda:
        "../../envs/ethosweep.yaml"
    script:
        "../scripts/verify.py"


# Only requested with `numerics: {bundleio: true}`.
rule bundle_program:
    input:
        pte=f"results/lower/{CELL}/model.pte",
        meta=f"results/lower/{CELL}/lower.json",
        bundle_io=bundle_test_data,
    output:
        bpte=f"results/bundle/{CELL}/model.bpte",
    log:
        f"logs/bundle/{CELL}.log",
    benchmark:
        f"benchmarks/bundle/{CELL}.tsv"
    params:
        code=code_version("ethosweep.bundle"),
    group:
        "cell"
    threads: 1
    resources:
        mem_mb=1000,
    conda:
        "../../envs/ethosweep.yaml"
    script:
        "../scripts/bundle.py"
