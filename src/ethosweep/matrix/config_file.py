"""The config file as its user wrote it: where it does not parse (with its line and column), and
its first violation of the schema as one line naming the key.

Snakemake's own messages name neither the file nor the line of a YAML error, and dump the whole
schema for a violation; these say the same in the form the rest of ethosweep's config errors use.
Torch-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from ethosweep.runtime.io import atomic_write_text


def yaml_problems(paths: Iterable[str | Path]) -> list[str]:
    """'config/config.yaml, line 2, column 3: expected ',' or '}', but got '<scalar>'': where each of
    `paths` (config files) fails to parse, for the one that does not (Snakemake's own message names
    neither the file nor the line). Files that parse, or do not exist, say nothing."""
    import yaml

    problems = []
    for path in dict.fromkeys(map(str, paths)):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            continue
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            said = getattr(error, "problem", None) or str(error)
            context, started = getattr(error, "context", None), getattr(error, "context_mark", None)
            if context and started is not None and started is not mark:
                said += f" ({context} that starts at line {started.line + 1}, column {started.column + 1})"
            problems.append(f"{path}{where}: {said}")
    return problems


# What the last start in a working directory made of its config (validate_once)
VALIDATED = Path(".snakemake") / "ethosweep-config.json"


def validate_once(config: dict[str, Any], schema: Path, check: Callable[[dict], None], memo: Path = VALIDATED) -> None:
    """Validate `config` against `schema` with `check` (Snakemake's validate, which also fills in the
    schema's defaults), or take what the last start in this working directory made of the same
    config, schema and installed packages (`memo`): importing jsonschema and reading the schema cost
    ~0.15 s of every start, a dry run's and each rerun's included. A config JSON cannot hold as it
    is (tuples, integer keys) is checked every time."""
    from ethosweep.runtime.packages import distributions_key

    try:
        said = json.dumps(config)
    except (TypeError, ValueError):
        return check(config)
    key = hashlib.sha256("\n".join([said, schema.read_text(), distributions_key()]).encode()).hexdigest()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # none yet, or not one of ours
        remembered = json.loads(memo.read_text())
        if remembered["key"] == key:
            config.clear()
            config.update(remembered["config"])
            return
    check(config)
    text = json.dumps({"key": key, "config": config})
    if json.loads(text)["config"] == config:
        with contextlib.suppress(OSError):
            atomic_write_text(memo, text)


def schema_error(config: dict[str, Any], schema_path: str | Path) -> str | None:
    """The config's most relevant schema violation as one line naming the key, or None.

    Snakemake's validate() reports a violation with a dump of the schema; this
    says the same in the form the rest of ethosweep's config errors use.
    """
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    where = _json_path(error.absolute_path) or "config"
    hint = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator == "additionalProperties":
        allowed = ", ".join(error.schema.get("properties", {}))
        return f"{where}: {error.message}; allowed keys: {allowed}"
    return f"{where}: {error.message}" + (f" ({_first_sentence(hint)})" if hint else "")


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[:end]


def _json_path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def resolve_models(config: dict[str, Any], base_dir: str | Path = ".") -> dict[str, Any]:
    """`config` with every `{from: <file>}` model entry replaced by that file's models (recursively)
    and each model's `task` set (its own, else the reference's, else its file's `task`), then cut to
    the models of `tasks` where the config names some. Raises ValueError naming the entry."""
    models = _models_of(config, Path(base_dir), where="models", seen=())
    wanted = config.get("tasks")
    if wanted:
        known = sorted({m.get("task") or "(none)" for m in models})
        unknown = [t for t in wanted if t not in known]
        if unknown:
            raise ValueError(f"tasks: no model of task {', '.join(map(repr, unknown))}; tasks here: {', '.join(known)}")
        models = [m for m in models if m.get("task") in wanted]
    return {**config, "models": models}


def _models_of(config: dict[str, Any], base: Path, where: str, seen: tuple[str, ...]) -> list[dict]:
    import yaml

    models = []
    for i, entry in enumerate(config.get("models") or []):
        if not isinstance(entry, dict) or "from" not in entry:
            task = entry.get("task") or config.get("task") if isinstance(entry, dict) else None
            models.append({**entry, "task": task} if task else entry)
            continue
        unknown = sorted(set(entry) - {"from", "task"})
        if unknown:
            raise ValueError(f"{where}[{i}]: {', '.join(unknown)} not allowed beside `from` (allowed: from, task)")
        path = base / str(entry["from"])
        if str(path.resolve()) in seen:
            raise ValueError(f"{where}[{i}].from: {entry['from']!r} includes itself")
        try:
            included = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as error:
            raise ValueError(f"{where}[{i}].from: cannot read {entry['from']!r} ({error.strerror})") from error
        if not isinstance(included, dict) or not included.get("models"):
            raise ValueError(f"{where}[{i}].from: {entry['from']!r} has no `models`")
        if entry.get("task"):
            included = {**included, "task": entry["task"]}
        models.extend(_models_of(included, base, f"{entry['from']}: models", (*seen, str(path.resolve()))))
    return models
