# Only models with `train:` in the config reach this rule (see trained_weights()).
rule train_model:
    input:
        model_file=model_source_file,
        # files the model's code reads (`reads:` in the config)
        reads=model_reads,
        dataset_files=model_dataset_files,
    output:
        weights="results/train/{model}/weights.pt",
        meta="results/train/{model}/train.json",
    log:
        "logs/train/{model}.log",
    benchmark:
        "benchmarks/train/{model}.tsv"
    priority: PRIORITY["export"]
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        stage="ethosweep.zoo.train:train_model",
        # results shared between results folders and checkouts, if a store is set (docs/cache.md)
        cache=True,
        model=model_params,
        seed=SWEEP.seed,
        dataset=model_dataset,
        train=model_training,
        tools=model_tools("ethosweep.zoo.train"),
        code=model_code("ethosweep.zoo.train"),
    script:
        "../scripts/stage.py"
