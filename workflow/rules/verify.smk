# Numerics on data: float vs quantized PyTorch vs the TOSA reference model (what the NPU
# computes), on the lower stage's edge program. One job per model, scheme and TOSA profile:
# every cell with that profile compiles the same TOSA (the summary checks each cell's TOSA
# sha256 against it). The u85 one is the u55 one's where both profiles verify the same
# quantized program, TOSA and delegation.
rule verify_numerics:
    input:
        # u85: the u55 profile's lowering (same_as_*), read even when it is a failure record
        # (then this profile verifies on its own)
        unpack(verification_to_share),
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        quantized=f"results/quantize/{PROFILE}/quantized.pt2",
        edge=f"{LOWERED}/edge.pt2",
        lower_meta=f"{LOWERED}/lower.json",
        tosa_sources=f"{LOWERED}/tosa_sources.json",
        dataset_files=model_dataset_files,
    output:
        report=f"{VERIFY}/verify.json",
        bundle_io=f"{VERIFY}/bundle_io.pt",
    log:
        f"logs/verify/{PROFILE}.log",
    benchmark:
        f"benchmarks/verify/{PROFILE}.tsv"
    priority: PRIORITY["verify"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=wall_clock_limit("verify_numerics"),
    params:
        stage="ethosweep.verify.numerics:verify_numerics",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        reads_failures=[f"same_as_{name}" for name in ("lower_meta", "tosa_sources", "delegation")],
        # where this profile's verification may be, if it is the u55 one's (verification_to_share)
        same_as_report=shared_verification("verify.json"),
        same_as_bundle_io=shared_verification("bundle_io.pt"),
        # the model's data and every numerics setting (common.smk): a change to one reruns this
        settings=verify_settings,
        repro=verify_repro_folder,
        tools=stage_versions("ethosweep.verify.numerics"),
        code=code_version("ethosweep.verify.numerics"),
    script:
        "../scripts/stage.py"


# The cells of a profile that fell back (Vela refused operators, kept on the CPU: vela.fallback)
# compiled from lowerings of their own: each is verified as the profile's is (a profile without
# such cells writes an empty record, without torch).
rule verify_fallbacks:
    input:
        compile_meta=profile_cell_paths(f"{COMPILED}/compile.json"),
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        quantized=f"results/quantize/{PROFILE}/quantized.pt2",
        dataset_files=model_dataset_files,
    output:
        report=f"{VERIFY}/fallbacks.json",
    log:
        f"logs/verify/{PROFILE}.fallbacks.log",
    benchmark:
        f"benchmarks/verify/{PROFILE}.fallbacks.tsv"
    priority: PRIORITY["verify"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        stage="ethosweep.verify.numerics:verify_fallbacks",
        cells=profile_cell_ids,
        settings=verify_settings,
        tools=stage_versions("ethosweep.verify.numerics"),
        code=code_version("ethosweep.verify.numerics"),
    script:
        "../scripts/stage.py"


# Only requested with `numerics: {bundleio: true}`.
rule bundle_program:
    input:
        # u85: the u55 profile's test cases too, where the verification is its (shared_bundle_io)
        unpack(shared_bundle_io),
        pte=f"{COMPILED}/model.pte",
        meta=f"{COMPILED}/compile.json",
        bundle_io=of_profile(f"{VERIFY}/bundle_io.pt"),
    output:
        bpte=f"results/bundle/{CELL}/model.bpte",
    log:
        f"logs/bundle/{CELL}.log",
    benchmark:
        f"benchmarks/bundle/{CELL}.tsv"
    group:
        "cell"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        stage="ethosweep.deploy.bundled_program:bundle_program",
        tools=stage_versions("ethosweep.deploy.bundled_program"),
        code=code_version("ethosweep.deploy.bundled_program"),
    script:
        "../scripts/stage.py"
