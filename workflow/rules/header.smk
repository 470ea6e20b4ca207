rule write_header:
    input:
        pte=f"{COMPILED}/model.pte",
        meta=f"{COMPILED}/compile.json",
    output:
        header=ensure(f"results/header/{CELL}/model_pte.h", non_empty=True),
    log:
        f"logs/header/{CELL}.log",
    benchmark:
        f"benchmarks/header/{CELL}.tsv"
    # a cell's short chain runs as one cluster job (group-components in the SLURM profile)
    group:
        "cell"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        symbol=header_symbol,
        code=code_version("ethosweep.deploy.header"),
    script:
        "../scripts/header.py"
