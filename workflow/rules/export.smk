rule export_model:
    input:
        model_file=model_source_file,
        # files the model's code reads (`reads:` in the config)
        reads=model_reads,
        weights=trained_weights,
    output:
        program="results/export/{model}/program.pt2",
        inputs="results/export/{model}/inputs.pt",
        reference="results/export/{model}/reference.pt",
        meta="results/export/{model}/export.json",
    log:
        "logs/export/{model}.log",
    benchmark:
        "benchmarks/export/{model}.tsv"
    priority: PRIORITY["export"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        # peak RSS over the deployed zoo's 60 models: at most 1.5 GiB (docs/performance.md)
        mem_mb=2000,
    params:
        stage="ethosweep.compile.export:export_model",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        model=model_params,
        seed=SWEEP.seed,
        tools=model_tools("ethosweep.compile.export"),
        code=model_code("ethosweep.compile.export"),
    script:
        "../scripts/stage.py"
