# Helpers shared by the rules: config validation, the matrix, input functions.
# The matrix is built once, here, by ethosweep.matrix.expand; nothing below imports torch,
# so parsing the workflow (and a no-op run) stays fast.
import dataclasses
import os
import re
import shutil
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from ethosweep.results import terminal as ethosweep_terminal
from ethosweep.results.table import read_summary_csv
from ethosweep.matrix import targets as ethosweep_targets
from ethosweep.runtime import estimate as ethosweep_estimate
from ethosweep.runtime import memory as ethosweep_memory
from ethosweep.runtime.codeversion import code_version, own_model_modules
from ethosweep.runtime.packages import local_modules, model_versions, stage_versions
from ethosweep.runtime import provenance as ethosweep_provenance
from ethosweep.runtime import scheduling as ethosweep_scheduling
from ethosweep.runtime import job_script as ethosweep_job_script
from ethosweep.runtime import pandas_free as ethosweep_pandas_free
from ethosweep.runtime import worker as ethosweep_worker
from ethosweep.results.cpu_summary import format_cpu_lines
from ethosweep.matrix.expand import ConfigError, build_sweep, dataset_files
from ethosweep.matrix.config_file import resolve_models, schema_error, validate_once
from ethosweep.firmware.sdk import format_status as format_sdk_status
from ethosweep.firmware.sdk import probe as probe_sdk

# This checkout of ethosweep (two folders up from this file). Not workflow.basedir: used as a
# Snakemake module from a folder of your own, that is your folder (docs/your-own-folder.md).
ETHOSWEEP_DIR = Path(str(workflow.current_basedir)).resolve().parents[1]
# Jobs import the ethosweep package. uv installs it into the project's venv; with
# `--sdm conda` (envs/ethosweep.yaml) it comes from here. Appended, so an
# environment's own copy wins. (Set, not required: no `envvars:` declaration.)
os.environ.update(
    PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ETHOSWEEP_DIR / "src")) if p)
)
# Package versions (provenance, the warm worker's key) looked up once, here, for every job
ethosweep_provenance.export_tool_versions()
ethosweep_worker.export_fingerprint()
# In a SLURM job's own Snakemake (a group's cells, each in a job step): one warm worker for them all
ethosweep_worker.serve_cluster_job(sys.argv)
# Snakemake's scheduler polls every ready job once a second per job ended, and asks of each input of
# a job every dependency whether it is a pipe (ethosweep.runtime.scheduling)
ethosweep_scheduling.without_idle_rounds()
ethosweep_scheduling.without_quadratic_input_check()
# ... and a SLURM group job's Snakemake runs its cells one at a time on the group's CPUs (same module)
ethosweep_scheduling.group_steps_side_by_side(workflow, sys.argv)
# A job's script process without importing Snakemake (ethosweep.runtime.job_script)
ethosweep_job_script.light_preamble()
# Snakemake imports pandas at every start to look for data frames where there are none (ethosweep.runtime.pandas_free)
ethosweep_pandas_free.params_without_pandas()


def validated(config):
    schema = ETHOSWEEP_DIR / "workflow" / "schemas" / "config.schema.yaml"
    try:
        with ethosweep_pandas_free.hidden():  # validate() imports it only to ask if the config is a data frame
            validate_once(config, schema, lambda c: validate(c, schema=str(schema)))
    except WorkflowError:  # said in one line that names the key (Snakemake's own message dumps the schema)
        raise WorkflowError(f"Invalid config: {schema_error(config, schema)}")


# `{from: <preset>}` entries become that preset's models (with their tasks), checked as the rest
try:
    config.update(resolve_models(config))
except ValueError as error:
    raise WorkflowError(f"Invalid config: {error}")
validated(config)
try:
    SWEEP = build_sweep(config, workflow_dir=ETHOSWEEP_DIR)
except ConfigError as error:
    raise WorkflowError(f"Invalid config: {error}")
# What is about to be swept: here for a dry run; a run says it when it starts, with its time
# (say_what_the_run_will_do, from the Snakefile's onstart).
if workflow.output_settings.dryrun:  # (workflow.dryrun is known only once the DAG runs)
    print(SWEEP.describe(), file=sys.stderr)
# What the firmware and run stages can use on this machine (filesystem and PATH only).
SDK = probe_sdk(config.get("sdk"))
if not SDK.firmware_ready():
    missing = ", ".join(c.name for c in SDK.firmware_missing())
    print(
        f"ethosweep: firmware and FVP runs not configured (missing: {missing}); "
        "the summary says what each cell lacks, `uv run ethosweep check-sdk` how to get it",
        file=sys.stderr,
    )
if SWEEP.cpu_cells:
    print(f"ethosweep: CPU-only cells: firmware {SDK.cpu_firmware_line()}; QEMU {SDK.qemu_line()}", file=sys.stderr)

# The path of a cell below each stage's folder (see Cell.id): `vela_tag` is empty for the Vela
# installed with ExecuTorch and "@vela-<version>" for another version the config sweeps.
CELL = "{model}/{quant}/{target}/{system_config}/{memory_mode}{vela_tag}"
# What quantize, lower and verify are keyed by: every cell of a model, scheme and TOSA
# profile (u55: Ethos-U55 and -U65, u85: Ethos-U85) shares their outputs.
PROFILE = "{model}/{quant}/{tosa_profile}"
# The lower stage's outputs per profile, and the vela stage's per cell (the cell's .pte).
LOWERED = f"results/lower/{PROFILE}"
COMPILED = f"results/vela/{CELL}"


def _alternatives(values):
    return "|".join(re.escape(v) for v in sorted(set(values), key=len, reverse=True))


# Generated from the validated matrix: a wildcard can only ever match a name the
# config defines, never a path fragment.
wildcard_constraints:
    model=_alternatives(SWEEP.models),
    quant=_alternatives(c.quant for c in SWEEP.cells),
    target=_alternatives(c.target for c in SWEEP.cells),
    system_config=_alternatives(c.system_config for c in SWEEP.cells),
    memory_mode=_alternatives(c.memory_mode for c in SWEEP.cells),
    # empty for the installed Vela's cells: a pattern that matches the empty string (an empty
    # constraint would fall back to Snakemake's `.+`)
    vela_tag=f"(?:{_alternatives(c.vela_tag for c in SWEEP.cells if c.vela_tag) or '(?!)'})?",
    vela_version=_alternatives(SWEEP.other_vela_versions()) or "no-other-vela-version",
    tosa_profile="u55|u85",
    board=_alternatives(SWEEP.boards) or "no-boards-configured",
    cpu=_alternatives(ethosweep_targets.CPU_TARGETS),


def cell_of(wildcards):
    w = wildcards
    return SWEEP.cell(w.model, w.quant, w.target, w.system_config, w.memory_mode, w.vela_tag)


def cell_paths(pattern, cells=None):
    """`pattern` (with {CELL} fields) formatted for every cell of the matrix (or of `cells`), in order."""
    return [pattern.format(**_cell_fields(c)) for c in (SWEEP.cells if cells is None else cells)]


def every_cell_path(pattern, when=True):
    """cell_paths(pattern) for the whole matrix as an input function: Snakemake calls it only when it
    plans the job that reads every cell, so a start that plans one cell (a SLURM job step) does not
    list the thousands of paths of a zoo's matrix (docs/clusters.md)."""
    return lambda wildcards: cell_paths(pattern) if when else []


def every_cell_record(wildcards):
    """The records of every cell (cell_record), as a params function, for the same reason."""
    return [cell_record(c) for c in SWEEP.cells]


def _cell_fields(cell):
    return {
        "model": cell.model,
        "quant": cell.quant,
        "target": cell.target,
        "system_config": cell.system_config,
        "memory_mode": cell.memory_mode,
        "vela_tag": cell.vela_tag,
        "tosa_profile": cell.tosa_profile,
    }


def cell_record(cell):
    """The plain-data description of a cell (with its boards) that the summary receives as a param."""
    return {
        **_cell_fields(cell),
        "id": cell.id,
        "task": SWEEP.models[cell.model].task,
        "vela_version": cell.effective_vela_version,
        "vela": cell.vela.as_params(),
        "seed": SWEEP.seed,
        "boards": [SWEEP.boards[b].as_params() for b in SWEEP.cell_boards.get(cell.id, [])],
    }


def board_cell_paths(pattern):
    """`pattern` (with {board} and cell fields) for every board and each of its cells."""
    return [pattern.format(board=board, **_cell_fields(cell)) for board, cell in SWEEP.board_cells()]


# ---- input functions and params ----------------------------------------------


def model_params(wildcards):
    return SWEEP.models[wildcards.model].as_params()


def model_source_file(wildcards):
    """A model file and the modules beside it that it imports are inputs (editing one reruns the
    model's chain); import models have none."""
    spec = SWEEP.models[wildcards.model]
    return [spec.file, *local_modules(spec.file)] if spec.file else []


def model_reads(wildcards):
    """The files a model's code reads (`reads:`): editing one reruns that model's chain."""
    return list(SWEEP.models[wildcards.model].reads)


def model_code(*modules):
    """A `code` param for the stages that run a model's code: theirs and, for an `import:` model built
    by ethosweep's own module (ethosweep.zoo.deployable), that module's, so editing it reruns them."""

    def version(wildcards):
        return code_version(*modules, *own_model_modules(SWEEP.models[wildcards.model].import_path))

    return version


def model_tools(*modules):
    """A `tools` param: the versions of what the stage modules run and of the model's own code
    (a model file's imports, an `import:` model's package; ethosweep.runtime.packages)."""

    def versions(wildcards):
        spec = SWEEP.models[wildcards.model]
        return {**stage_versions(*modules), **model_versions(spec.file, spec.import_path)}

    return versions


def vela_tools(*modules):
    """A `tools` param for a cell's Vela job: what the stage modules run, with the cell's own
    Vela version (the installed one, or the one its environment holds)."""

    def versions(wildcards):
        return {**stage_versions(*modules), "ethos-u-vela": cell_of(wildcards).effective_vela_version}

    return versions


def vela_environment(version):
    """Where the environment of a Vela version other than the installed one lives."""
    return f"results/tools/vela/{version}"


def cell_vela_env(wildcards):
    """A cell of another Vela version needs that version's environment (ethosweep.vela.environment)."""
    version = cell_of(wildcards).vela_version
    return [f"{vela_environment(version)}/env.json"] if version else []


def cell_vela_version(wildcards):
    """None for the installed Vela (in-process), else the cell's version."""
    return cell_of(wildcards).vela_version


def model_keep_on_cpu(wildcards):
    """What the model's config keeps on the CPU (`keep_on_cpu`), as the lower stage takes it."""
    return [dict(item) for item in SWEEP.models[wildcards.model].keep_on_cpu]


def model_dataset(wildcards):
    return SWEEP.models[wildcards.model].dataset


def model_dataset_files(wildcards):
    """A user's dataset files are inputs (editing them reruns calibration, training, verification)."""
    return dataset_files(SWEEP.models[wildcards.model].dataset)


def model_classifier(wildcards):
    """`classifier:` from the model's config: None lets labelled data decide (ethosweep.verify.verdicts)."""
    return SWEEP.models[wildcards.model].classifier


def model_training(wildcards):
    return SWEEP.models[wildcards.model].train


def trained_weights(wildcards):
    """The train stage's weights for a model with `train:`; none for the others."""
    if SWEEP.models[wildcards.model].train is None:
        return []
    return [f"results/train/{wildcards.model}/weights.pt"]


def numerics(key):
    return SWEEP.numerics[key]


# The verify stage's settings (verify_numerics's keyword arguments), for every rule that verifies.
VERIFY_SETTINGS = ("evaluation_samples", "random_samples", "min_agreement", "max_error_steps")
VERIFY_SETTINGS += ("max_error_steps_int16", "min_cosine", "max_relative_error", "bundle_samples")


def verify_settings(wildcards):
    """A model's data and every numerics setting, as the verify stage takes them."""
    spec = SWEEP.models[wildcards.model]
    return {
        "dataset": spec.dataset,
        "classifier": spec.classifier,
        "seed": SWEEP.seed,
        **{key: numerics(key) for key in VERIFY_SETTINGS},
    }


def profile_cells(wildcards):
    """The cells of a model, scheme and TOSA profile (those verify_fallbacks looks at)."""
    return SWEEP.cells_of(model=wildcards.model, quant=wildcards.quant, tosa_profile=wildcards.tosa_profile)


def profile_cell_paths(pattern):
    return lambda wildcards: cell_paths(pattern, profile_cells(wildcards))


def profile_cell_ids(wildcards):
    return [c.id for c in profile_cells(wildcards)]


def report_setting(key, default):
    """A key of the config's `report:` section (the schema's defaults when the section is absent)."""
    return (config.get("report") or {}).get(key, default)


PROFILES_SWEPT = set(SWEEP.quantize_keys())
# The profile whose quantization and verification a profile's start from (quantize.py, numerics.py):
# u85 from u55, so a matrix of Ethos-U55/-U65 cells only (the commonest) does nothing extra.
STARTS_FROM = {"u85": "u55"}


def in_profile(pattern, wildcards, profile):
    """`pattern` (with {PROFILE} fields) for the model and scheme of `wildcards` and `profile`."""
    return pattern.format(model=wildcards.model, quant=wildcards.quant, tosa_profile=profile)


def quantization_to_share(wildcards):
    """The u85 profile's quantization starts from the u55 one's, in every matrix (so adding or
    removing targets never changes a job's inputs): where the quantizer's passes leave the same
    graph for both profiles, it is the same program (see ethosweep/compile/quantize.py). An
    Ethos-U85-only matrix quantizes for the u55 profile too and takes that program."""
    other = STARTS_FROM.get(wildcards.tosa_profile)
    if other is None:
        return {}
    return {
        "same_as_quantized": in_profile(f"results/quantize/{PROFILE}/quantized.pt2", wildcards, other),
        "same_as_meta": in_profile(f"results/quantize/{PROFILE}/quantize.json", wildcards, other),
    }


def verification_to_share(wildcards):
    """The u85 profile's verification is the u55 one's where the matrix has both and both verify the
    same quantized program, TOSA and delegation (ethosweep/verify/numerics.py). That is decided from
    the two lowerings, so the u85 job waits for the u55 lowering, never for its verification (one
    of a large model's takes hours): it then writes where the u55 one's will be (the params).
    Only where the matrix has both, unlike the quantization: an Ethos-U85-only matrix would
    otherwise not lower for u55. (Adding the first U55 cell to such a model reruns its u85
    verification, and only that.)"""
    other = profile_shared(wildcards.model, wildcards.quant, wildcards.tosa_profile)
    if other is None:
        return {}
    own = wildcards.tosa_profile
    return {
        "quantize_meta": in_profile(f"results/quantize/{PROFILE}/quantize.json", wildcards, own),
        "delegation": in_profile(f"{LOWERED}/delegation.json", wildcards, own),
        "same_as_lower_meta": in_profile(f"{LOWERED}/lower.json", wildcards, other),
        "same_as_tosa_sources": in_profile(f"{LOWERED}/tosa_sources.json", wildcards, other),
        "same_as_delegation": in_profile(f"{LOWERED}/delegation.json", wildcards, other),
    }


def profile_shared(model, quant, profile):
    """The profile whose verification this profile's may be (see verification_to_share), or None."""
    other = STARTS_FROM.get(profile)
    return other if other is not None and (model, quant, other) in PROFILES_SWEPT else None


def shared_verification(name):
    """A param: where the profile's verification may be (its output `name`), '' for none."""

    def path(wildcards):
        other = profile_shared(wildcards.model, wildcards.quant, wildcards.tosa_profile)
        return in_profile(f"{VERIFY}/{name}", wildcards, other) if other else ""

    return path


def shared_bundle_io(wildcards):
    """A cell's bundle: the other profile's test cases too, where its profile's may be those."""
    other = profile_shared(wildcards.model, wildcards.quant, ethosweep_targets.tosa_profile(wildcards.target))
    return {"shared_bundle_io": in_profile(f"{VERIFY}/bundle_io.pt", wildcards, other)} if other else {}


def of_profile(pattern):
    """An input function: `pattern` (with {PROFILE} fields) for the TOSA profile of a cell's wildcards."""

    def path(wildcards):
        return in_profile(pattern, wildcards, ethosweep_targets.tosa_profile(wildcards.target))

    return path


def cell_repro_folder(wildcards):
    """Where a failed Vela run of the cell leaves its reproducer (not an output: Snakemake
    deletes a failed job's outputs, and this is what the user needs after a failure)."""
    return f"{COMPILED}/repro".format(**wildcards)


def verify_repro_folder(wildcards):
    """Where a crash of the TOSA reference model leaves its reproducer (not an output, for the same
    reason as cell_repro_folder's)."""
    return f"{VERIFY}/repro".format(**wildcards)


def cell_tosa_profile(wildcards):
    """The cell's TOSA profile (u55: Ethos-U55 and -U65, u85: Ethos-U85)."""
    return ethosweep_targets.tosa_profile(wildcards.target)


def cell_vela_options(wildcards):
    return cell_of(wildcards).vela.as_params()


def custom_vela_ini(wildcards):
    """A custom vela.ini is an input of the cells that use it, so editing it reruns them."""
    config_path = cell_of(wildcards).vela.config
    return [config_path] if config_path else []


def board_params(wildcards):
    return SWEEP.boards[wildcards.board].as_params()


def cell_params(wildcards):
    return cell_record(cell_of(wildcards))


# The .pte as a C header, per cell (`headers: cells`), or only in the bundles of cells that fit a
# bare-metal board (`headers: bundles`): a header is about 5x its .pte, and a zoo's thousands of cells
# would need hundreds of GB of them.
HEADER = f"results/header/{CELL}/model_pte.h"
HEADERS_PER_CELL = config.get("headers", "cells") == "cells"


def header_output():
    """The Vela job's header output, where each cell gets one."""
    return {"header": ensure(HEADER, non_empty=True)} if HEADERS_PER_CELL else {}


def header_symbol(wildcards):
    return cell_of(wildcards).symbol


# ---- targets and end-of-run reporting ----------------------------------------

SUMMARY = "results/summary.csv"


VERIFY = f"results/verify/{PROFILE}"


def verified_cell_paths(pattern):
    """every_cell_path(pattern) for the verify stage's outputs, or none where `numerics.verify` is off."""
    return every_cell_path(pattern, when=numerics("verify") is not False)


def all_outputs(wildcards):
    """The end of the run (summary, report) and every cell's final artifacts, failed cells'
    included: a failure recorded in place of an artifact (ethosweep.runtime.outcome) is that
    cell's outcome, kept until something it depends on changes."""
    bundles = cell_paths(f"results/bundle/{CELL}/model.bpte") if numerics("bundleio") else []
    return [
        SUMMARY,
        "results/report/index.html",
        *cell_paths(f"{COMPILED}/model.pte"),
        *cell_paths(f"{COMPILED}/summary.json"),
        *(cell_paths(HEADER) if HEADERS_PER_CELL else []),
        *dict.fromkeys(cell_paths(f"{VERIFY}/verify.json") if numerics("verify") is not False else []),
        *bundles,
        *board_cell_paths(f"results/deploy/{{board}}/{CELL}"),
        "results/firmware/sdk.json",
        *dict.fromkeys(cell_paths(FIRMWARE_PLAN)),
        *(dict.fromkeys(cell_paths(FIRMWARE_ELF)) if SDK.firmware_ready() else []),
        *[f"results/run/{c.id}/run.json" for c in fvp_cells()],
        *([CPU_SUMMARY] if SWEEP.cpu_cells else []),
        *[f"{NPU_RUNNER}/firmware.json".format(**_cell_fields(c)) for c in npu_runner_cells()],
    ]


# ---- the order jobs start in ---------------------------------------------------------------------

# With more jobs ready than cores, Snakemake starts those of higher priority first, else the largest
# inputs, so a model's small export would wait behind others' lowerings. Pipeline order instead: a
# broken model is reported in a run's first seconds, the long lowerings start early, and a lowered
# model's cells (what fits) come before its verification. A run raises the jobs on chains that would
# bound it (say_what_the_run_will_do; docs/how-it-works.md, measured in docs/performance.md).
PRIORITY = {"export": 50, "quantize": 40, "lower": 30, "vela": 25, "verify": 20}


# ---- how long a job may run ----------------------------------------------------------------------

# What each job of the zoo presets' models cost on this project's machine (estimate.MEASURED_COSTS)
KNOWN_COSTS = ethosweep_estimate.KnownCosts.read()


def known_cost_key(wildcards):
    """A job of one model: its key in the costs measured on this project's machine (estimate.MEASURED_COSTS)."""
    spec = SWEEP.models.get(wildcards.get("model"))
    return ethosweep_estimate.job_key(spec.as_params(), wildcards) if spec else None


def wall_clock_limit(rule):
    """A `runtime` resource that follows the job's measured cost (ethosweep.runtime.estimate.time_limit)."""
    return ethosweep_estimate.time_limit(rule, KNOWN_COSTS, known_cost_key, workflow)
