"""The store of stage results shared between results folders (ethosweep.runtime.cache): a second
experiment takes its exports, quantizations, lowerings and verifications from it, byte for byte;
any change to a key part misses it; a damaged or half-written entry is never taken."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import DOCS, append, make_workdir, planned_jobs, snakemake, typed
from ethosweep.runtime import cache

MODELS = [
    {"name": "mnist", "file": "models/mnist.py"},
    {
        "name": "add",
        "import": "executorch.examples.models.toy_model:AddModule",
        "inputs": [{"shape": [1]}, {"shape": [1]}],
    },
]
FIRST = {
    "models": MODELS,
    "targets": ["ethos-u55-128"],
    "memory_modes": ["Shared_Sram"],
    "numerics": {"evaluation_samples": 100},
}
# the second experiment: another memory mode and a board, beside the first's cells
SECOND = {**FIRST, "memory_modes": ["Shared_Sram", "Sram_Only"], "boards": ["corstone-300"]}
CACHED_RULES = ("export", "quantize", "lower", "verify")


def job(folder: Path, **changes) -> dict:
    """A job's items as ethosweep.runtime.binding hands them over, its input a real file."""
    (folder / "in.pt2").write_bytes(b"program")
    items = {
        "input": {"program": str(folder / "in.pt2")},
        "output": {"quantized": str(folder / "out" / "q.pt2"), "meta": str(folder / "out" / "q.json")},
        "params": {"stage": "m:f", "cache": True, "code": "c0de", "tools": {"torch": "2.13.0"}, "seed": 0},
        "wildcards": {"model": "mnist"},
    }
    for part, value in changes.items():
        items[part] = {**items[part], **value}
    return items


def outputs(job_items: dict, text: str = "result") -> dict[str, str]:
    for path in job_items["output"].values():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(f"{text} {Path(path).name}")
    return cache.outputs_of(job_items)


@pytest.mark.parametrize(
    "part, change",
    [
        ("params", {"code": "0ther"}),  # ethosweep's code (the stage's modules' hash)
        ("params", {"tools": {"torch": "2.14.0"}}),  # a tool's version
        ("params", {"seed": 1}),  # a config setting
        ("wildcards", {"model": "add"}),
        ("input", "content"),  # the model file, the program: their bytes
    ],
)
def test_any_key_part_changes_the_key(tmp_path, part, change):
    before = cache.key("quantize_model", ["m:f"], job(tmp_path))
    if change == "content":
        changed = job(tmp_path)
        Path(changed["input"]["program"]).write_bytes(b"another program")
    else:
        changed = job(tmp_path, **{part: change})
    assert cache.key("quantize_model", ["m:f"], changed) != before
    # how the job uses the store is not part of its result; the input's path is not either
    moved = tmp_path / "elsewhere.pt2"
    moved.write_bytes(b"program")
    assert (
        cache.key("quantize_model", ["m:f"], job(tmp_path, params={"cache": False}, input={"program": str(moved)}))
        == before
    )


def test_an_entry_is_restored_byte_for_byte_and_a_damaged_one_is_removed(tmp_path):
    store, items = tmp_path / "store", job(tmp_path)
    key = cache.key("quantize_model", ["m:f"], items)
    assert cache.put(store, key, outputs(items), {"rule": "quantize_model"})
    assert not cache.put(store, key, outputs(items, "another"), {})  # the first one stays
    for path in items["output"].values():
        Path(path).unlink()
    assert cache.restore(store, key, cache.outputs_of(items))["rule"] == "quantize_model"
    assert Path(items["output"]["meta"]).read_text() == "result q.json"
    # a damaged entry (a byte changed in a stored file) is never taken, and is gone
    stored = cache.Entry.of(store, key).folder / "quantized"
    stored.write_text(stored.read_text().replace("result", "resulT"))
    assert cache.restore(store, key, cache.outputs_of(items)) is None
    assert not cache.Entry.of(store, key).folder.exists()


def test_a_half_written_entry_is_not_an_entry(tmp_path):
    store, items = tmp_path / "store", job(tmp_path)
    key = cache.key("quantize_model", ["m:f"], items)
    folder = cache.Entry.of(store, key).folder
    folder.mkdir(parents=True)
    (folder / "quantized").write_text("half")  # outputs written, the manifest (written last) not
    (store / "tmp" / f"{key}.123.abc").mkdir(parents=True)  # a run that died while storing
    assert cache.restore(store, key, cache.outputs_of(items)) is None and cache.entries(store) == []
    assert cache.put(store, key, outputs(items), {})  # a whole entry replaces the empty place
    assert json.loads((folder / cache.MANIFEST).read_text())["outputs"] == ["meta", "quantized"]


def test_an_entry_pruned_by_another_run_while_it_is_checked_is_a_miss(tmp_path, monkeypatch):
    """Another run's prune can remove the entry between the manifest read and a file's digest (seen
    in CI under load): a miss, no exception, and nothing stored since is removed for it."""
    store, items = tmp_path / "store", job(tmp_path)
    key = cache.key("quantize_model", ["m:f"], items)
    assert cache.put(store, key, outputs(items), {"rule": "quantize_model"})
    digest = cache.file_digest

    def pruned_meanwhile(path):
        cache.remove(cache.Entry.of(store, key).folder)  # the other run's prune, at this moment
        return digest(path)

    monkeypatch.setattr(cache, "file_digest", pruned_meanwhile)
    assert cache.restore(store, key, cache.outputs_of(items)) is None


def test_the_store_is_pruned_least_recently_used_first(tmp_path):
    import os

    store = tmp_path / "store"
    keys = []
    for seed in range(3):
        (tmp_path / str(seed)).mkdir()
        items = job(tmp_path / str(seed), params={"seed": seed})
        keys.append(cache.key("quantize_model", ["m:f"], items))
        cache.put(store, keys[-1], outputs(items), {})
        os.utime(cache.Entry.of(store, keys[-1]).folder, (seed, seed))
    sizes = {folder: size for folder, size, _ in cache.entries(store)}
    oldest = cache.Entry.of(store, keys[0]).folder
    removed = cache.prune(store, limit=sum(sizes.values()) - sizes[oldest])  # room for all but one
    assert removed == [cache.Entry.of(store, keys[0]).folder] and len(cache.entries(store)) == 2


@pytest.mark.slow
def test_a_second_experiment_takes_the_expensive_stages_from_the_store(tmp_path):
    env = {cache.ENV: str(tmp_path / "store")}
    first = make_workdir(tmp_path / "first", FIRST)
    snakemake(first, env=env)
    second = make_workdir(tmp_path / "second", SECOND)
    snakemake(second, env=env)
    # every export, quantization, lowering and verification came from the store
    logs = [p for rule in CACHED_RULES for p in (second / "logs" / rule).rglob("*.log") if ".fallbacks" not in p.name]
    assert len(logs) == 2 * len(CACHED_RULES)
    assert all("ethosweep: taken from the cache: " in p.read_text() for p in logs)
    # the cells both experiments have: the same programs, byte for byte, and the same verdicts
    for pte in (first / "results" / "vela").rglob("model.pte"):
        assert (second / pte.relative_to(first)).read_bytes() == pte.read_bytes()
    for report in (first / "results" / "verify").rglob("verify.json"):
        assert json.loads((second / report.relative_to(first)).read_text()) == json.loads(report.read_text())
    assert planned_jobs(second, env=env) == {}  # restored outputs are not taken for stale
    # a changed key part misses: the model file's export is computed again, the others' are not
    append(second / "models" / "mnist.py", "\n# edited\n")
    snakemake(second, env=env)
    assert "taken from the cache" not in (second / "logs/export/mnist.log").read_text()
    assert "taken from the cache" in (second / "logs/export/add.log").read_text()
    # without the store, nothing is read from or written to it
    third = make_workdir(tmp_path / "third", FIRST)
    snakemake(third)
    assert not any("taken from the cache" in p.read_text() for p in (third / "logs").rglob("*.log"))


def test_the_stores_commands_say_what_it_holds_and_prune_it(tmp_path, monkeypatch):
    store, items = tmp_path / "store", job(tmp_path)
    cache.put(store, cache.key("quantize_model", ["m:f"], items), outputs(items), {"rule": "quantize_model"})
    workdir = make_workdir(tmp_path / "w", FIRST)
    for command in ("uv run ethosweep cache", "uv run ethosweep cache prune"):
        assert f"`{command}`" in DOCS["docs/cache.md"]
        monkeypatch.delenv(cache.ENV, raising=False)
        unset = typed(command, workdir)
        assert unset.returncode == 1 and "set ETHOSWEEP_CACHE to a folder" in unset.stdout
        monkeypatch.setenv(cache.ENV, str(store))
        shown = typed(command, workdir)
        assert shown.returncode == 0, shown.stderr
        assert f"{store}: 1 entry" in shown.stdout and "(quantize_model 1)" in shown.stdout
    monkeypatch.setenv(cache.LIMIT_ENV, "0")
    pruned = typed("uv run ethosweep cache prune", workdir)
    assert "removed 1 entry" in pruned.stdout and f"{store}: 0 entries" in pruned.stdout


def test_a_lowering_inside_a_job_is_taken_from_the_store_the_same_bytes(tiny_sweep, tmp_path, monkeypatch):
    """A fallback's lowering (what Vela refused kept on the CPU) repeats in every cell and folder that
    refuses the same operators, and in its verification: in the store, it is lowered once. Without a
    store it is kept beside the quantized program, so a folder's cells and their verification share
    the same bytes (ExecuTorch's lowering of a program is not the same bytes in every process)."""
    from ethosweep.compile.delegation import lower_quantized

    quantized = str(tmp_path / "quantize" / "quantized.pt2")
    Path(quantized).parent.mkdir()
    shutil.copy(tiny_sweep / "results/quantize/mnist/int8/u55/quantized.pt2", quantized)
    keep = [{"node": "aten_convolution_default_1"}]
    computed = lower_quantized(quantized, "u55", keep)  # no store: kept in the folder's own
    assert len(cache.entries(tmp_path / "quantize" / "fallbacks")) == 1
    again = lower_quantized(quantized, "u55", keep)
    assert (again.edge, again.template) == (computed.edge, computed.template)  # the very bytes, edge included
    monkeypatch.setenv(cache.ENV, str(tmp_path / "store"))
    stored = lower_quantized(quantized, "u55", keep)
    assert len(cache.entries(tmp_path / "store")) == 1
    taken = lower_quantized(quantized, "u55", keep)
    for lowered in (stored, taken):
        assert (lowered.template, lowered.table) == (computed.template, computed.table)
    assert taken.edge == stored.edge  # (an edge program's zip records when it was written: not compared)
    assert taken.table["delegated"] == "partial"
    # the whole lowering is another key: another entry, the profile's own bytes
    whole = lower_quantized(quantized, "u55", [])
    assert len(cache.entries(tmp_path / "store")) == 2
    assert whole.template == (tiny_sweep / "results/lower/mnist/int8/u55/template.pte").read_bytes()


def _store_worker(root: str, worker: int, rounds: int, results: str) -> None:
    """One of several processes sharing a store at its size limit: each round puts an entry, takes a
    random one back (checking every byte), remembers one, and prunes; any exception is counted."""
    import random
    import traceback

    generator, errors, checked = random.Random(worker), [], 0
    work = Path(results) / f"w{worker}"
    for round_ in range(rounds):
        try:
            key = f"{generator.randrange(24):064x}"  # 24 keys shared by every worker
            outputs = {"a": str(work / "a.bin"), "b": str(work / "b.bin")}
            payload = {name: (key + name).encode() * 2048 for name in outputs}  # ~130 KB an entry
            work.mkdir(parents=True, exist_ok=True)
            for name, path in outputs.items():
                Path(path).write_bytes(payload[name])
            if cache.put(Path(root), key, outputs, {"rule": "stress", "label": key, "log": ""}):
                cache.prune_quietly(Path(root))
            taken = {name: str(work / f"taken_{name}") for name in outputs}
            if cache.restore(Path(root), key, taken) is not None:
                assert all(Path(taken[n]).read_bytes() == payload[n] for n in outputs), "restored bytes differ"
                checked += 1
            memo = cache.remembered("stress memo", {"n": round_ % 5}, lambda: {"x": str(round_ % 5).encode()})
            assert memo == {"x": str(round_ % 5).encode()}
            cache.prune(Path(root))
        except Exception:  # noqa: BLE001 - counted, with its traceback
            errors.append(traceback.format_exc())
    (Path(results) / f"w{worker}.json").write_text(json.dumps({"errors": errors, "checked": checked}))


def test_several_runs_putting_taking_and_pruning_one_store_at_its_limit_at_once(tmp_path, monkeypatch):
    """Six processes at once on one store kept at ~4 entries (each round puts, takes, remembers and
    prunes, so entries vanish under the others constantly): no exception, every byte taken right."""
    import multiprocessing

    root = tmp_path / "store"
    monkeypatch.setenv(cache.ENV, str(root))
    monkeypatch.setenv(cache.LIMIT_ENV, str(4 * 270_000 / 2**30))
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_store_worker, args=(str(root), w, 60, str(tmp_path))) for w in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
        assert worker.exitcode == 0
    outcomes = [json.loads((tmp_path / f"w{w}.json").read_text()) for w in range(6)]
    assert [o["errors"] for o in outcomes] == [[]] * 6, outcomes[0]["errors"][:1]
    assert sum(o["checked"] for o in outcomes) > 50  # the takes that found their entry checked every byte
    assert sum(size for _, size, _ in cache.entries(root)) <= 5 * 270_000


def _remember_once(own: str, out: str) -> None:
    """Remember bytes that differ at every computation (as a lowering's do), noting each computation."""
    import os
    import time

    def compute() -> dict[str, bytes]:
        with open(Path(out, "computed"), "a") as note:
            note.write("x")
        time.sleep(1)  # the others ask meanwhile
        return {"bytes": os.urandom(16)}

    taken = cache.remembered("random bytes", {"key": 1}, compute, Path(own))
    Path(out, f"taken-{os.getpid()}").write_bytes(taken["bytes"])


def test_an_entry_wanted_at_once_is_computed_once_and_shared(tmp_path, monkeypatch):
    """Three processes want one entry of a store of their own at once (the Ethos-U55 and -U65 cells of
    a profile whose Vela refuses the same operators): one computes it, the others wait and take the
    same bytes, though a second computation would give others."""
    import multiprocessing

    monkeypatch.delenv(cache.ENV, raising=False)
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_remember_once, args=(str(tmp_path / "own"), str(tmp_path))) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert (tmp_path / "computed").read_text() == "x"
    assert len({path.read_bytes() for path in tmp_path.glob("taken-*")}) == 1
    assert len(cache.entries(tmp_path / "own")) == 1


@pytest.mark.slow
def test_two_sweeps_sharing_one_store_at_its_limit_at_once_end_right(tmp_path):
    """Two experiments of different configs, started at once on one store kept small enough that they
    prune each other's entries while they run: both end without an error, each cell's program and
    verdict what the same sweep computes without the store."""
    import subprocess

    from conftest import snakemake_command

    configs = {"one": FIRST, "two": {**FIRST, "memory_modes": ["Sram_Only"], "targets": ["ethos-u65-256"]}}
    store = {"ETHOSWEEP_CACHE": str(tmp_path / "store"), "ETHOSWEEP_CACHE_MAX_GB": "0.004"}
    started = {}
    for name, config in configs.items():
        work = make_workdir(tmp_path / name, config)
        # the warm worker shared by both, as two runs on one machine share it
        env = {**__import__("os").environ, **store}
        started[name] = subprocess.Popen(
            snakemake_command(work, cores=1), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, proc in started.items():
        out, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, out[-4000:]
        assert "Traceback" not in out and "FileNotFoundError" not in out, out[-4000:]
    for name, config in configs.items():
        alone = snakemake(make_workdir(tmp_path / f"{name}-alone", config))
        assert alone.returncode == 0
        assert rows(tmp_path / name) == rows(tmp_path / f"{name}-alone")


def rows(work: Path) -> dict:
    import csv

    with open(work / "results/summary.csv", newline="") as f:
        return {r["cell"]: (r["status"], r["pte_sha256"], r["numerics"], r["vs_float"]) for r in csv.DictReader(f)}
