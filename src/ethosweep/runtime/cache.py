"""A store of the expensive stages' results, shared between results folders and checkouts.

Inside one results folder Snakemake never computes a job twice. A team's second experiment (another
folder, another checkout, a colleague's run of the same models) would export, quantize, lower and
verify every model again, although the inputs, code and tools are the same. With the store set
(`ETHOSWEEP_CACHE=<folder>`, off by default) the rules that ask for it (`params.cache`) take their
outputs from it when their key is there, and put them there after computing them.

The key is a sha256 over everything the job's result depends on: the rule and the functions it
runs, every params item (the code version of the stage's modules and the versions of the tools and
packages it runs are params of every rule: ethosweep.runtime.codeversion and .packages), the
wildcards, and the bytes of every input file (a directory: every file in it, by relative path). A
change to any of them is another key. File contents, not paths: a second checkout hits the first
one's entries (an exported program's stack traces then name the model file where it was first
exported; nothing a cell computes reads them).

Why not Snakemake's own between-workflow cache (`cache: True`, `--cache`): it takes a rule's
outputs only as one file or files that differ by extension, and these rules write several named
files and a directory; it keys on the conda environment, which these jobs do not run in; and its
results cannot be told from a failure record. docs/cache.md has the measurements.

An entry is a folder `<key[:2]>/<key>/` with the outputs under their names and `manifest.json`
(each file's size and sha256, written last). It is written into `tmp/` and renamed into place, so
a reader sees a whole entry or none, and two runs storing the same key keep the first. A restored
file is checked against the manifest; an entry that does not match (damaged, truncated, edited) is
removed and the job computes its result again. Failures are never stored: a failure of the cell's
inputs is recorded in its own folder as always (ethosweep.runtime.outcome). The store is pruned to
its size limit (`ETHOSWEEP_CACHE_MAX_GB`, default 20) after each entry, least recently used first;
`uv run ethosweep cache` says what it holds and `uv run ethosweep cache prune` prunes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

FORMAT = 1  # the layout of an entry: a new layout is a new key space
ENV = "ETHOSWEEP_CACHE"
LIMIT_ENV = "ETHOSWEEP_CACHE_MAX_GB"
DEFAULT_LIMIT_GB = 20.0
MANIFEST = "manifest.json"
SKIPPED_PARAMS = {"cache"}  # how the job uses the store is not part of what it computes


def store() -> Path | None:
    """The store's folder, if one is set (ETHOSWEEP_CACHE)."""
    folder = os.environ.get(ENV, "").strip()
    return Path(folder).expanduser().resolve() if folder else None


def limit_bytes() -> int:
    try:
        return int(float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_GB)) * 2**30)
    except ValueError:
        return int(DEFAULT_LIMIT_GB * 2**30)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_digest(path: str | Path) -> str:
    """A file's sha256, or a directory's: over its files' relative paths and contents."""
    path = Path(path)
    if path.is_file():
        return file_digest(path)
    if not path.is_dir():
        return "missing"
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{file_digest(file)}\0".encode())
    return "dir:" + digest.hexdigest()


def key(rule: str, stages: list[str], job: dict[str, Any]) -> str:
    """The key of a job's result (see the module docstring)."""
    inputs = {
        name: [content_digest(p) for p in value] if isinstance(value, list) else content_digest(value)
        for name, value in sorted(job.get("input", {}).items())
    }
    described = {
        "format": FORMAT,
        "rule": rule,
        "stages": stages,
        "params": {k: v for k, v in job.get("params", {}).items() if k not in SKIPPED_PARAMS},
        "wildcards": job.get("wildcards", {}),
        "inputs": inputs,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    folder: Path

    @classmethod
    def of(cls, root: Path, key: str) -> Entry:
        return cls(root / key[:2] / key)

    def manifest(self) -> dict | None:
        try:
            return json.loads((self.folder / MANIFEST).read_text())
        except (OSError, ValueError):
            return None


def outputs_of(job: dict[str, Any]) -> dict[str, str]:
    """The job's named outputs (one path each)."""
    return {name: value for name, value in job.get("output", {}).items() if isinstance(value, str)}


def restore(root: Path, key: str, outputs: dict[str, str]) -> dict | None:
    """Put the entry's outputs in place, checked against its manifest; its manifest, or None for no
    usable entry (none, another job's outputs, or damaged: then it is removed)."""
    entry = Entry.of(root, key)
    manifest = entry.manifest()
    if manifest is None:
        return None
    try:
        usable = sorted(manifest.get("outputs", {})) == sorted(outputs) and _intact(entry, manifest)
    except FileNotFoundError:  # another run pruned the entry while it was checked: a miss
        return None
    if not usable:
        remove(entry.folder)
        return None
    try:
        for name, path in outputs.items():
            _copy_in(entry.folder / name, Path(path))
    except FileNotFoundError:  # another run pruned the entry while it was copied: a miss, the job computes it
        return None
    try:
        os.utime(entry.folder)  # recently used: pruned last
    except FileNotFoundError:  # another run pruned it after the copy: what was copied was checked
        pass
    return manifest


def _intact(entry: Entry, manifest: dict) -> bool:
    for relative, (size, digest) in manifest.get("files", {}).items():
        path = entry.folder / relative
        if not path.is_file() or path.stat().st_size != size or file_digest(path) != digest:
            return False
    return True


def _copy_in(source: Path, target: Path) -> None:
    """An output from the store, replacing whatever is there (written beside it, then renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    # fresh modification times (shutil.copy, not copy2): Snakemake takes an output older than
    # its inputs for stale
    try:
        if source.is_dir():
            shutil.copytree(source, partial, copy_function=shutil.copy)
            if target.exists():
                shutil.rmtree(target)
        else:
            shutil.copy(source, partial)
    except OSError:  # nothing half-copied is left behind
        shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)


def put(root: Path, key: str, outputs: dict[str, str], about: dict) -> bool:
    """Store a job's outputs under `key` (atomically: a whole entry or none); False if another run
    stored it first or it cannot be written (the store is then just not used for it)."""
    entry = Entry.of(root, key)
    if entry.manifest() is not None:
        return False
    staging = root / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir(parents=True)
        files = {}
        for name, path in outputs.items():
            source = Path(path)
            if source.is_dir():
                shutil.copytree(source, staging / name)
                members = [p for p in (staging / name).rglob("*") if p.is_file()]
            else:
                shutil.copy2(source, staging / name)
                members = [staging / name]
            for member in members:
                files[str(member.relative_to(staging))] = (member.stat().st_size, file_digest(member))
        manifest = {"key": key, "outputs": sorted(outputs), "files": files, "stored": time.time(), **about}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        entry.folder.parent.mkdir(parents=True, exist_ok=True)
        if entry.folder.exists() and entry.manifest() is None:  # damaged: no whole entry is there
            remove(entry.folder)
        os.rename(staging, entry.folder)  # fails if the entry appeared meanwhile: the first one stays
        return True
    except OSError:
        return False
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def remembered(
    kind: str, parts: dict, compute: Callable[[], dict[str, bytes]], own: Path | None = None
) -> dict[str, bytes]:
    """`compute()`'s results (name -> bytes), taken from the store when it holds them for these key
    `parts`, put there after computing; without a store, computed, or, with `own` (a store of the
    caller's, where none is set), taken from and put there. For work inside a job that repeats across
    jobs and folders: a Vela job's fallback lowering, the fallback's verification. One job computes
    a key at a time; another that needs it waits and takes its result (the same bytes, where the work
    does not give the same bytes twice). A failure (an exception of `compute`) is never stored."""
    with seeded(kind, parts, own) as (held, keep):
        if held is not None:
            return held
        results = compute()
        keep(results)
        return results


@contextlib.contextmanager
def seeded(kind: str, parts: dict, own: Path | None = None):
    """(what the store keeps under the key or None, a function that keeps a result there; the first
    result kept stays), held by one job at a time per key while nothing is kept: a second job waits
    for the first one's result instead of computing it beside it, and once a result is kept, jobs
    take it side by side. For work that what another job found can shorten but not replace: a Vela
    crash's search, seeded by what a cell of the same partition found (ethosweep.vela.partitions).
    Without a store (nor `own`), nothing is held or kept."""
    root = store() or own
    if root is None:
        yield None, lambda results: None
        return
    key = hashlib.sha256(json.dumps({"format": FORMAT, "kind": kind, **parts}, sort_keys=True).encode()).hexdigest()
    keep = functools.partial(_kept, root, key, kind)
    held = _taken(root, key, kind)
    if held is not None:
        yield held, keep
        return
    with _computing(root, key):
        yield _taken(root, key, kind), keep


def _taken(root: Path, key: str, kind: str) -> dict[str, bytes] | None:
    manifest = Entry.of(root, key).manifest()
    if manifest is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ethosweep-memo-") as folder:
        paths = {name: os.path.join(folder, name) for name in manifest.get("outputs", [])}
        try:
            if restore(root, key, paths) is None:
                return None
            print(f"ethosweep: the {kind} taken from the store: {Entry.of(root, key).folder}", flush=True)
            return {name: Path(path).read_bytes() for name, path in paths.items()}
        except OSError:
            return None


def _kept(root: Path, key: str, kind: str, results: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="ethosweep-memo-") as folder:
        paths = {name: os.path.join(folder, name) for name in results}
        for name, data in results.items():
            Path(paths[name]).write_bytes(data)
        if put(root, key, paths, {"rule": kind, "label": kind, "log": ""}):
            prune_quietly(root)


@contextlib.contextmanager
def _computing(root: Path, key: str):
    """Held while a key is looked up and computed: a lock file of its own under locks/ (not an entry)."""
    locks = root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / key, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def prune_quietly(root: Path) -> None:
    """prune, after a job stored its result: the store is a help, never the job's failure (the disk's
    faults aside, another run's changes are skipped by prune itself; any other error is said)."""
    try:
        prune(root)
    except OSError as error:
        print(f"ethosweep: the store was not pruned ({error}); the next entry stored prunes it", flush=True)


def remove(folder: Path) -> None:
    """An entry out of the store: renamed away first, so no reader sees half of it."""
    trash = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.removed"
    try:
        os.rename(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def entries(root: Path) -> list[tuple[Path, int, float]]:
    """Every whole entry: (folder, bytes, last used). Another run may remove an entry while this
    one looks (its own prune): an entry gone meanwhile is not counted."""
    found = []
    for manifest in root.glob(f"??/*/{MANIFEST}"):
        folder = manifest.parent
        try:
            size = sum(_size(p) for p in folder.rglob("*"))
            found.append((folder, size, folder.stat().st_mtime))
        except FileNotFoundError:
            continue
    return found


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except FileNotFoundError:
        return 0


def prune(root: Path, limit: int | None = None) -> list[Path]:
    """Remove the least recently used entries until the store is within `limit` bytes, and what
    crashed runs left in tmp/ more than a day ago; the entries removed. Safe beside other runs
    putting, taking and pruning: what another run removed first is skipped."""
    limit = limit_bytes() if limit is None else limit
    for leftover in (root / "tmp").glob("*") if (root / "tmp").is_dir() else []:
        try:
            if time.time() - leftover.stat().st_mtime > 86400:
                shutil.rmtree(leftover, ignore_errors=True)
        except FileNotFoundError:
            continue
    held = sorted(entries(root), key=lambda e: e[2])
    total, removed = sum(size for _, size, _ in held), []
    for folder, size, _ in held:
        if total <= limit:
            break
        remove(folder)
        total -= size
        removed.append(folder)
    return removed


def describe_store(root: Path) -> str:
    held = entries(root)
    total = sum(size for _, size, _ in held)
    by_rule: dict[str, int] = {}
    for folder, _, _ in held:
        rule = (Entry(folder).manifest() or {}).get("rule", "?")
        by_rule[rule] = by_rule.get(rule, 0) + 1
    rules = ", ".join(f"{rule} {n}" for rule, n in sorted(by_rule.items())) or "nothing yet"
    return f"{root}: {entries_said(len(held))}, {total / 2**20:,.1f} MiB of {limit_bytes() / 2**30:g} GiB ({rules})"


def entries_said(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"
