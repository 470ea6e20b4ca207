from ethosweep.runtime.jobs import run_stages

run_stages(
    snakemake,
    (
        "ethosweep.vela.compile:compile_cell",
        dict(
            template=snakemake.input.template,
            lower_meta=snakemake.input.lower_meta,
            target=snakemake.wildcards.target,
            system_config=snakemake.wildcards.system_config,
            memory_mode=snakemake.wildcards.memory_mode,
            vela=snakemake.params.vela,
            pte=snakemake.output.pte,
            summary=snakemake.output.summary,
            per_layer=snakemake.output.per_layer,
            meta=snakemake.output.meta,
            repro=snakemake.params.repro,
            vela_version=snakemake.params.vela_version,
            vela_env=snakemake.input.vela_env[0] if snakemake.input.vela_env else None,
            tosa_sources=snakemake.input.tosa_sources,
            quantized=snakemake.input.quantized,
            profile=snakemake.params.profile,
            keep_on_cpu=snakemake.params.keep_on_cpu,
            fallback=snakemake.params.vela.get("fallback", True),
        ),
    ),
    (
        "ethosweep.deploy.header:write_header",
        dict(
            pte=snakemake.output.pte,
            meta=snakemake.output.meta,
            header=snakemake.output.header,
            symbol=snakemake.params.symbol,
        ),
    ),
)
