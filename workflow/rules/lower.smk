# One lowering per model, scheme and TOSA profile (u55: Ethos-U55 and -U65, u85: Ethos-U85),
# shared by every cell with that profile: the partitioning and the TOSA do not depend on the
# cell (see ethosweep/compile/lower.py). Per cell only Vela and the .pte's assembly remain (vela.smk).
rule lower_to_tosa:
    input:
        quantized=f"results/quantize/{PROFILE}/quantized.pt2",
    output:
        template=ensure(f"{LOWERED}/template.pte", non_empty=True),
        tosa_dir=directory(f"{LOWERED}/tosa"),
        edge=f"{LOWERED}/edge.pt2",
        delegation=f"{LOWERED}/delegation.json",
        tosa_sources=f"{LOWERED}/tosa_sources.json",
        meta=f"{LOWERED}/lower.json",
    log:
        f"logs/lower/{PROFILE}.log",
    benchmark:
        f"benchmarks/lower/{PROFILE}.tsv"
    priority: PRIORITY["lower"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        # peak RSS over the deployed zoo: at most 1.2 GiB (docs/performance.md)
        mem_mb=2000,
    params:
        stage="ethosweep.compile.lower:lower_to_tosa",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        directories=["tosa_dir"],
        # operators the model's config keeps on the CPU (the partitioner's operator-support checks)
        keep_on_cpu=model_keep_on_cpu,
        tools=stage_versions("ethosweep.compile.lower"),
        code=code_version("ethosweep.compile.lower"),
    script:
        "../scripts/stage.py"
