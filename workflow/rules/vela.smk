# Another Vela version than the one installed beside ExecuTorch (`vela: {versions: [...]}`): an
# environment of its own, made once with uv from the registry (see ethosweep/vela/environment.py).
# A local rule: it needs the package registry, which cluster nodes often cannot reach.
rule install_vela:
    output:
        venv=directory(f"{vela_environment('{vela_version}')}/venv"),
        lock=f"{vela_environment('{vela_version}')}/requirements.txt",
        env=f"{vela_environment('{vela_version}')}/env.json",
    log:
        "logs/tools/vela/{vela_version}.log",
    benchmark:
        "benchmarks/tools/vela/{vela_version}.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        stage="ethosweep.vela.environment:create_environment",
        directories=["venv"],
        tools=stage_versions("ethosweep.vela.environment"),
        code=code_version("ethosweep.vela.environment"),
    script:
        "../scripts/stage.py"


# Per cell: Vela on each partition's TOSA with the cell's target, system config, memory mode
# and options (ExecuTorch's own Vela entry point), and the cell's .pte assembled from the
# profile's template (see ethosweep/vela/compile.py): a cell's only compile work. The same job
# then writes the .pte's C header (ethosweep/deploy/header.py; `headers: cells`): as a job of its
# own it cost a cell as much as Vela (process start-up), and it is keyed by the cell just the same.
rule compile_with_vela:
    input:
        template=of_profile(f"{LOWERED}/template.pte"),
        lower_meta=of_profile(f"{LOWERED}/lower.json"),
        # where each TOSA tensor comes from: names what Vela refuses in the model's terms
        tosa_sources=of_profile(f"{LOWERED}/tosa_sources.json"),
        # lowered again, with what Vela refuses kept on the CPU (vela.fallback)
        quantized=of_profile(f"results/quantize/{PROFILE}/quantized.pt2"),
        vela_ini=custom_vela_ini,
        vela_env=cell_vela_env,
    # fmt: off
    # (the header last: a failure record names the first output, the .pte, to --forcerun)
    output:
        pte=ensure(f"{COMPILED}/model.pte", non_empty=True),
        summary=f"{COMPILED}/summary.json",
        per_layer=f"{COMPILED}/per_layer.csv",
        meta=f"{COMPILED}/compile.json",
        **header_output(),
    # fmt: on
    log:
        f"logs/vela/{CELL}.log",
    benchmark:
        f"benchmarks/vela/{CELL}.tsv"
    priority: PRIORITY["vela"]
    # a cell's short chain (this, then its bundle) runs as one cluster job (group-components in the SLURM profile)
    group:
        "cell"
    conda:
        "../../envs/ethosweep.yaml"
    threads: 1
    resources:
        # the template program and Vela's working set, above the largest Vela job measured in the
        # deployed zoo (docs/performance.md, "The whole sweep, resumed")
        mem_mb=2000,
    params:
        stage=["ethosweep.vela.compile:compile_cell", "ethosweep.deploy.header:write_header"],
        vela=cell_vela_options,
        repro=cell_repro_folder,
        symbol=header_symbol,
        vela_version=cell_vela_version,
        profile=cell_tosa_profile,
        keep_on_cpu=model_keep_on_cpu,
        tools=vela_tools("ethosweep.vela.compile", "ethosweep.deploy.header"),
        code=code_version("ethosweep.vela.compile", "ethosweep.deploy.header"),
    script:
        "../scripts/stage.py"
