"""When Vela refuses what the partitioner delegated: the sweep names it, keeps it on the CPU and
compiles the rest (vela.fallback), or, with the fallback off, fails the cell naming it.

tests/models/residual_int16.py with int16 activations: on Ethos-U55 Vela 5.1.0 refuses its
residual add of a convolution's accumulator; on Ethos-U85 it compiles.
"""

import csv
import json
import re
import shutil

import yaml

from conftest import REPO, make_workdir, planned_jobs, snakemake
from ethosweep.verify.verdicts import PASSED

CONFIG = {
    "models": [{"name": "residual", "file": "tests/models/residual_int16.py"}],
    "quantization": ["a16w8"],
    "targets": ["ethos-u55-128", "ethos-u85-256"],
    "memory_modes": ["Shared_Sram"],
}
REFUSED = (
    "Vela 5.1.0 cannot compile stem, project (conv2d, int16 in, 3x3, stride 1, 8 channels) in partition 0 on "
    "ethos-u55-128 / Shared_Sram: Non-passthrough operation (Conv2D) could not run on NPU "
    "(found by Vela on parts of it)"
)


def rows(workdir) -> dict[str, dict]:
    return {r["target"]: r for r in csv.DictReader(open(workdir / "results/summary.csv", newline=""))}


def test_what_vela_refuses_is_kept_on_the_cpu_and_the_rest_compiled_or_named_in_the_failure(tmp_path):
    work = make_workdir(tmp_path, CONFIG)
    shutil.copytree(REPO / "tests" / "models", work / "tests" / "models")
    proc = snakemake(work)
    u55, u85 = rows(work)["ethos-u55-128"], rows(work)["ethos-u85-256"]
    # the refused residual add kept on the CPU, the two convolutions on the NPU
    assert (u55["status"], u55["delegation"], u55["cpu_operators"]) == ("ok", "partial", "aten_add_tensor x1")
    assert u55["reason"].startswith(f"fallback: {REFUSED}") and int(u55["vela_cycles_total"]) > 0
    assert u55["reason"].endswith(
        "kept on the CPU and the rest compiled: stem, project (conv2d, int16 in, 3x3, stride 1, 8 channels)"
    )
    # verified on the lowering it compiled from (verify_fallbacks): the add on the CPU in PyTorch, the
    # convolutions on the TOSA reference model, against the quantized model and float
    assert u55["numerics"] in PASSED, u55["numerics_reason"]
    verified = json.loads((work / "results/verify/residual/a16w8/u55/fallbacks.json").read_text())["verifications"]
    assert [v["cells"] for v in verified] == [["residual/a16w8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"]]
    assert verified[0]["verdict"] == u55["numerics"] and verified[0]["reason"] == u55["numerics_reason"]
    assert json.loads((work / "results/verify/residual/a16w8/u85/fallbacks.json").read_text())["verifications"] == []
    assert u55["vela_time_covers"].startswith("the NPU part only") and float(u55["cpu_tensor_kib"]) > 0
    assert (u85["status"], u85["delegation"]) == ("ok", "full")
    assert "ok (fallback)" in proc.stderr and "2 of 2 cells ok" in proc.stderr
    # the operator map says what was refused and where it went
    operators = list(csv.DictReader(open(work / "results/operators.csv", newline="")))
    kept = [r for r in operators if r["where"] == "refused by Vela, kept on the CPU"]
    assert [(r["operator"], r["family"], r["held_back"]) for r in kept] == [
        ("Conv2D (in Vela)", "Ethos-U55/U65", "residual")
    ]
    # the per-model table describes what the Ethos-U55 cell compiled from: the fallback's lowering
    models = {r["family"]: r for r in csv.DictReader(open(work / "results/operator_models.csv", newline=""))}
    u55_model = models["Ethos-U55/U65"]
    assert (u55_model["delegated"], u55_model["cpu_compute_ops"]) == ("partial (fallback)", "1"), u55_model
    assert 0 < float(u55_model["npu_mac_share_pct"]) <= 100 and models["Ethos-U85"]["delegated"] == "full"
    # the cell's report page: the add on the CPU because Vela refused it, and its own lowering's verdict
    page = work / "results/report/cells/residual/a16w8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram.html"
    text = page.read_text()
    assert "refused by Vela 5.1.0, kept on the CPU (vela.fallback)" in text
    assert "KeepNode" not in text and "The numerics are not verified" not in text
    said = re.search(r"against the quantized model \(verify stage, TOSA reference model\): <b>([^<]+)</b>", text)
    assert said and said.group(1) in PASSED, said
    # the reproducer of the refusal stays beside the cell
    cell = work / "results/vela/residual/a16w8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    assert (cell / "repro/partition_0_refused.tosa").exists() and (cell / "repro/command.sh").exists()
    # and the cell's record says what locating and falling back cost
    record = json.loads((cell / "compile.json").read_text())
    fallback = record["fallback"]
    assert fallback["located"]["tries"] == 5 and fallback["located"]["complete"], fallback["located"]
    assert fallback["located"]["seconds"] > 0 and fallback["seconds"] > 0
    assert [a["failed"] for a in fallback["attempts"]] == [""]  # the residual add alone, at the first attempt
    # the TOSA the cell compiled: the fallback's own lowering, not the profile's template
    profile = json.loads((work / "results/lower/residual/a16w8/u55/lower.json").read_text())
    assert [p["tosa_sha256"] for p in record["partitions"]] != [p["tosa_sha256"] for p in profile["partitions"]]
    assert planned_jobs(work) == {}

    # fallback off: the cell fails, naming what Vela refuses; only the Vela jobs and what reads them rerun
    config = yaml.safe_load((work / "config/config.yaml").read_text())
    (work / "config/config.yaml").write_text(yaml.safe_dump({**config, "vela": {"fallback": False}}))
    assert planned_jobs(work)["compile_with_vela"] == 2 and "lower_to_tosa" not in planned_jobs(work)
    snakemake(work)
    u55 = rows(work)["ethos-u55-128"]
    assert u55["status"] == "failed" and u55["reason"].startswith(f"vela: {REFUSED}")
    assert rows(work)["ethos-u85-256"]["status"] == "ok"


def test_a_part_with_shape_operands_is_rebuilt_with_them(tmp_path):
    """TOSA 1.0 gives a SLICE its start and size as shape constants, which are not tensors: the
    search for refused operators read them as tensors and stopped (MobileViT-XXS int8 on Ethos-U55,
    where Vela crashes). A part holding a SLICE now carries its shape constants with their values,
    and Vela compiles it."""
    from ethosweep.compile.delegation import delegate_payloads, lower_quantized
    from ethosweep.compile.tosa_graph import loaded
    from ethosweep.vela import refusals
    from ethosweep.vela.partitions import compile_partition
    from ethosweep.verify import chain

    chain.export(tmp_path, {"name": "split", "file": "tests/models/split_conv.py"})
    chain.quantize(tmp_path, "split", "int8", "u55")
    (tosa,) = delegate_payloads(lower_quantized(str(tmp_path / "split.pt2"), "u55").template)
    with loaded(tosa) as (_, block):
        operators = list(block.operators)
        (index,) = [i for i, op in enumerate(operators) if str(op.op) == "Op.SLICE"][:1]
        wanted = {name: refusals._shape_values(block.shapes[name]) for name in operators[index].inputs[1:]}
    part = refusals.part_of(tosa, {index})
    with loaded(part) as (_, block):
        assert [str(op.op) for op in block.operators][-1] == "Op.SLICE"
        assert {name: refusals._shape_values(block.shapes[name]) for name in wanted} == wanted
    assert wanted[operators[index].inputs[2]] == [1, 4, 4, 8]  # a half of the 16 channels, NHWC
    flags = ["--accelerator-config=ethos-u55-128", "--output-format=raw"]
    payload, row, _ = compile_partition(part, flags, tmp_path / "vela", what="Vela on a part")
    assert payload and row


def test_a_second_experiment_takes_the_refusal_search_and_the_fallback_from_the_store(tmp_path):
    """What Vela refuses depends on the partition, the Vela and the accelerator, not on the memory
    mode: a second folder with another memory mode takes the search, the fallback's lowering and its
    verification from the store; another accelerator searches again (its own key) and shares the
    lowering. Its programs and verdicts are those computed without the store."""
    from ethosweep.runtime import cache

    env = {cache.ENV: str(tmp_path / "store")}
    folders = {}
    for name, config in (
        ("first", {**CONFIG, "targets": ["ethos-u55-128"]}),
        ("second", {**CONFIG, "targets": ["ethos-u55-128", "ethos-u65-256"], "memory_modes": ["Sram_Only"]}),
        ("without", {**CONFIG, "targets": ["ethos-u55-128", "ethos-u65-256"], "memory_modes": ["Sram_Only"]}),
    ):
        folders[name] = make_workdir(tmp_path / name, config)
        shutil.copytree(REPO / "tests" / "models", folders[name] / "tests" / "models")
        snakemake(folders[name], env=env if name != "without" else None)
    second, without = folders["second"], folders["without"]
    vela_logs = second / "logs/vela/residual/a16w8"
    u55 = (vela_logs / "ethos-u55-128/Ethos_U55_High_End_Embedded/Sram_Only.log").read_text()
    u65 = (vela_logs / "ethos-u65-256/Ethos_U65_High_End/Sram_Only.log").read_text()
    assert "the refusal search taken from the store" in u55 and "the lowering taken from the store" in u55
    assert "the refusal search taken from the store" not in u65 and "the lowering taken from the store" in u65
    verified = (second / "logs/verify/residual/a16w8/u55.fallbacks.log").read_text()
    assert "the fallback verification taken from the store" in verified
    # the same work as without the store: programs byte for byte, the rows' verdicts and reasons
    for pte in (without / "results/vela").rglob("model.pte"):
        assert (second / pte.relative_to(without)).read_bytes() == pte.read_bytes()
    fields = ("status", "reason", "delegation", "numerics", "numerics_reason", "pte_sha256")
    ours, theirs = rows(second), rows(without)
    assert {t: [ours[t][f] for f in fields] for t in ours} == {t: [theirs[t][f] for f in fields] for t in theirs}
    assert ours["ethos-u65-256"]["reason"].startswith("fallback: Vela 5.1.0 cannot compile stem, project")
    record = json.loads((second / "results/verify/residual/a16w8/u55/fallbacks.json").read_text())
    assert [len(v["cells"]) for v in record["verifications"]] == [2]  # one lowering kept the same node


def test_the_refusal_search_is_keyed_by_the_flags_that_decide_what_vela_refuses():
    from ethosweep.compile.compile_spec import vela_flags
    from ethosweep.matrix.cell import Cell
    from ethosweep.vela.partitions import search_flags

    def key(target, system, mode, crashed=False):
        return search_flags(vela_flags(Cell("model", "int8", target, system, mode)), {}, crashed)

    u55 = key("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert key("ethos-u55-128", "Ethos_U55_Deep_Embedded", "Sram_Only") == u55
    assert key("ethos-u65-256", "Ethos_U65_High_End", "Shared_Sram") != u55  # another accelerator
    assert not any(f.startswith(("--memory-mode=", "--system-config=", "--config=")) for f in u55)
    # a crash may depend on anything: every flag, and the vela.ini by its content, not its path
    crashed = key("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", crashed=True)
    assert "--memory-mode=Shared_Sram" in crashed and any(f.startswith("--config-sha256=") for f in crashed)
    assert crashed != key("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Sram_Only", crashed=True)


def test_a_vela_crash_that_needs_several_operators_names_them_and_keeps_them_on_the_cpu(tmp_path):
    """Vela 5.1.0 crashes (SIGSEGV) on an int8 attention's query scale on Ethos-U55: the 5-D SLICE
    of the heads, its RESHAPE and the MUL, together (MobileViT-XXS in miniature); each part compiles
    without the others. The search keeps the reshapes when Vela crashed, drops units while the part
    still crashes, names the three, and the multiply kept on the CPU lets the rest compile. The
    second cell of the partition confirms what the first found instead of searching again."""
    config = {
        "models": [{"name": "query_scale", "file": "tests/models/query_scale.py"}],
        "quantization": ["int8"],
        "targets": ["ethos-u55-128", "ethos-u55-256"],
        "memory_modes": ["Shared_Sram"],
    }
    work = make_workdir(tmp_path, config)
    shutil.copytree(REPO / "tests" / "models", work / "tests" / "models")
    snakemake(work)
    for target, u55 in rows(work).items():
        assert (u55["status"], u55["delegation"], u55["cpu_operators"]) == ("ok", "partial", "aten_mul_tensor x1")
        assert u55["reason"].startswith(
            "fallback: Vela 5.1.0 cannot compile mul, unbind (mul, int32 in + slice, int8 in + reshape, int8 in) in "
            f"partition 0 on {target} / Shared_Sram: crashed (SIGSEGV), twice in fresh processes (found by Vela on "
            "parts of it)"
        )
        assert u55["numerics"] in PASSED, u55["numerics_reason"]
    # one cell searched (the first to take the partition's turn), the other confirmed its answer
    cells = work / "results/vela/query_scale/int8"
    records = {
        target: json.loads((cells / target / "Ethos_U55_High_End_Embedded/Shared_Sram/compile.json").read_text())
        for target in config["targets"]
    }
    located = sorted((r["fallback"]["located"] for r in records.values()), key=lambda c: c["tries"])
    seeded, searched = located
    assert seeded.get("seeded") and not searched.get("seeded") and seeded["complete"], located
    # the partition without the three compiles; the three crash together, and any two of them compile
    assert seeded["tries"] == 1 + 1 + 3 < searched["tries"], located
    refused = [r["fallback"]["refused"] for r in records.values()]
    assert refused[0] == refused[1]
    assert list((work / "results/lower/query_scale/int8/u55/searches").glob("??/*/manifest.json"))
    # the reproducer keeps the smallest part that still crashes: the three operators
    from ethosweep.compile.tosa_graph import loaded

    repro = cells / "ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/repro"
    with loaded((repro / "partition_0_refused.tosa").read_bytes()) as (_, block):
        kinds = {str(op.op).removeprefix("Op.") for op in block.operators}
    assert {"SLICE", "RESHAPE", "MUL"} <= kinds and "TRANSPOSE" not in kinds


def test_a_seed_found_at_the_search_limit_is_taken_as_it_is_where_it_holds(tmp_path):
    """MobileViT-XXS int8's first search stopped at its limit, and each of the partition's other 19
    cells searched in full again (385 Vela runs each) to reach an answer as incomplete. A seed found at
    the limit is taken where the partition without it compiles and each of its parts fails, and stays
    incomplete; the query scale Vela crashes on (MobileViT-XXS in miniature), searched with a limit of
    three runs, is such a seed."""
    import itertools

    from ethosweep.compile.delegation import delegate_payloads, lower_quantized
    from ethosweep.runtime.isolation import ToolCrashed
    from ethosweep.vela import refusals
    from ethosweep.vela.partitions import compile_partition
    from ethosweep.verify import chain

    chain.export(tmp_path, {"name": "query_scale", "file": "tests/models/query_scale.py"})
    chain.quantize(tmp_path, "query_scale", "int8", "u55")
    (tosa,) = delegate_payloads(lower_quantized(str(tmp_path / "query_scale.pt2"), "u55").template)
    runs = itertools.count()

    def crashes(part: bytes) -> bool:
        try:
            flags = ["--accelerator-config=ethos-u55-128", "--output-format=raw"]
            compile_partition(part, flags, tmp_path / f"v{next(runs)}", what="a part", retry_crash=False)
        except ToolCrashed:
            return True
        return False

    first = refusals.locate(tosa, crashes, max_tries=3, crashed=True)
    assert not first.complete and first.refused
    again = refusals.locate(tosa, crashes, crashed=True, seed=first)
    assert again.seeded and not again.complete and again.tries <= 1 + len(first.refused)
    assert [r.tensors for r in again.refused] == [r.tensors for r in first.refused]


def test_parts_refused_as_the_same_operators_are_named_under_one_description():
    """A transformer's blocks repeat: six blocks Vela crashes on the same way are one description
    in the reason, which keeps room for what the fallback found."""
    from ethosweep.vela.partitions import _named
    from ethosweep.vela.refusals import Refused

    terms = "(slice, int8 in + reshape, int8 in + mul, int32 in)"
    blocks = [Refused([], [], description=f"stages.{i}.attn {terms}") for i in range(6)]
    conv = Refused([], [], description="stem, project (conv2d, int16 in, 3x3, stride 1, 8 channels)")
    assert _named([*blocks, conv]) == (
        f"stages.0.attn, stages.1.attn, stages.2.attn and 3 more {terms}; "
        "stem, project (conv2d, int16 in, 3x3, stride 1, 8 channels)"
    )
    assert _named([conv]) == conv.description
