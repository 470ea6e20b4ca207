# One bundle per board and cell of that board (`boards:` in the config).
rule bundle_deployment:
    input:
        pte=f"{COMPILED}/model.pte",
        meta=f"{COMPILED}/compile.json",
        vela_summary=f"{COMPILED}/summary.json",
    output:
        bundle=directory(f"results/deploy/{{board}}/{CELL}"),
    log:
        f"logs/deploy/{{board}}/{CELL}.log",
    benchmark:
        f"benchmarks/deploy/{{board}}/{CELL}.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        stage="ethosweep.deploy.deploy:bundle_deployment",
        directories=["bundle"],
        board=board_params,
        cell=cell_params,
        symbol=header_symbol,
        tools=stage_versions("ethosweep.deploy.deploy"),
        code=code_version("ethosweep.deploy.deploy"),
    script:
        "../scripts/stage.py"
