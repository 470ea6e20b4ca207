"""A job's arguments, bound by name: every rule runs workflow/scripts/stage.py, which hands the
job's named inputs, outputs, params and wildcards (and its log and threads) to the library
function the rule names in `params.stage`; each of the function's parameters takes the job's
item of the same name.

This is the thin scripts' preamble written once: a rule and its function agree on names, and a
name the function needs that the rule does not give, or that the rule gives twice (as an input,
an output or a param), is an error that names both; a wildcard of the same name as one of
those gives way to it. The job's items travel as JSON (to the warm worker) and are bound where the
function is imported (ethosweep.runtime.execute), so the client never imports a stage's module.

How a value is passed:
- a parameter annotated as a list (list[...], Sequence[...]) gets the item as a list;
- any other parameter given a file list (an optional input: a list of none or one file) gets its
  one file, or None for none;
- `log` is the job's (first) log file, `threads` its thread count;
- a params item named `settings` (a dict) gives its keys as further names (the verify stages'
  thresholds and sample counts, one dict for two rules); a function that takes **keyword
  arguments gets those of them no parameter of its own takes;
- a parameter annotated with a dataclass gets one, its fields bound as parameters are (from the
  items named `prefix + field`, its class's `prefix` or ""): what travels together is one value
  in the stage, not a long signature that mirrors the rule. A dataclass parameter with a default
  keeps it when the rule gives none of its fields.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Callable

from ethosweep.runtime.job_script import SOURCES

SPREAD = "settings"  # a params item whose keys are names of their own
LISTS = ("list", "Sequence", "tuple", "Iterable")  # annotations of a parameter that takes a list
JOB_ONLY = {
    "stage",
    "directories",
    "aggregate",
    "reads_failures",
    "cache",
    "code",
    "tools",
}  # the job's, not the stage's


class BindingError(TypeError):
    """A rule and its function disagree on a name."""


def named(job: dict[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """Every name the job gives, with where it comes from (a name may come from several places)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for source in SOURCES:
        for name, value in job.get(source, {}).items():
            if source == "params" and name in JOB_ONLY:
                continue
            if source == "params" and name == SPREAD and isinstance(value, dict):
                for key, setting in value.items():
                    found.setdefault(key, []).append((f"params.{SPREAD}", setting))
                continue
            found.setdefault(name, []).append((source, value))
    for name in ("log", "threads"):
        if job.get(name) is not None:
            found.setdefault(name, []).append((name, job[name]))
    # a wildcard is the fallback: a rule's params item of the same name is the rule's expansion of
    # it (params.model: the model's spec, for the wildcard model)
    return {name: [p for p in places if p[0] != "wildcards"] or places for name, places in found.items()}


def bind(function: Callable[..., Any], job: dict[str, Any], rule: str = "the rule") -> dict[str, Any]:
    """The keyword arguments `function` takes from `job` (job_items), by name."""
    given = named(job)
    arguments = {}
    parameters = inspect.signature(function).parameters.values()
    hints = _hints(function)
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        value = _bound(parameter, hints.get(parameter.name), given, function.__name__, rule)
        if value is not _NOT_GIVEN:
            arguments[parameter.name] = value
    if any(p.kind == p.VAR_KEYWORD for p in parameters):  # it passes the settings on
        spread = f"params.{SPREAD}"
        arguments |= {n: v for n, places in given.items() for s, v in places if s == spread and n not in arguments}
    return arguments


_NOT_GIVEN = object()


def _bound(parameter: inspect.Parameter, hint: Any, given: dict, function: str, rule: str) -> Any:
    """The value of one parameter (a dataclass's built from its fields), or _NOT_GIVEN for its default."""
    if dataclasses.is_dataclass(hint):
        prefix = getattr(hint, "prefix", "")
        fields = {f.name: f for f in dataclasses.fields(hint)}
        inner = _hints(hint)
        values = {}
        for name, field in fields.items():
            missing = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            as_parameter = inspect.Parameter(
                prefix + name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if missing else None,
                annotation=inner.get(name, field.type),
            )
            found = _places(as_parameter, given, function, rule)
            if found is not _NOT_GIVEN:
                values[name] = found
        if not values and parameter.default is not parameter.empty:
            return _NOT_GIVEN
        try:
            return hint(**values)
        except TypeError as error:  # a field without a default the rule does not give
            raise BindingError(f"{rule} gives too little for {function}()'s {parameter.name}: {error}") from None
    return _places(parameter, given, function, rule)


def _places(parameter: inspect.Parameter, given: dict, function: str, rule: str) -> Any:
    places = given.get(parameter.name, [])
    if len(places) > 1:
        where = " and ".join(f"{source}.{parameter.name}" for source, _ in places)
        raise BindingError(f"{rule} gives {where}: {function}() takes one {parameter.name}")
    if not places:
        if parameter.default is parameter.empty:
            raise BindingError(f"{rule} gives no {parameter.name}, which {function}() needs")
        return _NOT_GIVEN
    source, value = places[0]
    return _as_annotated(value, source, parameter, function)


def _hints(owner: Any) -> dict[str, Any]:
    """Its annotations resolved to types (they are strings under `from __future__ import annotations`);
    {} where one names what its module only imports for type checkers."""
    try:
        return typing.get_type_hints(owner)
    except Exception:  # noqa: BLE001 - then no parameter is taken as a dataclass
        return {}


def _as_annotated(value: Any, source: str, parameter: inspect.Parameter, function: str) -> Any:
    annotation = parameter.annotation
    if str(annotation).removeprefix("typing.").startswith(LISTS) or typing.get_origin(annotation) in (list, tuple):
        return [value] if isinstance(value, str) else list(value)
    if source in ("input", "output") and isinstance(value, list):  # an optional file: none or one
        if len(value) > 1:
            raise BindingError(f"{function}() takes one file as {parameter.name}, the rule gives {len(value)}")
        return value[0] if value else None
    return value
