"""A content hash of the library code a stage runs.

Snakemake reruns a job when its rule, script or params change, but it does not
see the modules the script imports. Each rule passes the hash of its stage
module and everything that module imports from this package as a param, so
editing the library reruns exactly the stages that use the edited code.
"""

from __future__ import annotations

import ast
import hashlib
import re
from functools import lru_cache
from pathlib import Path

PACKAGE = "ethosweep"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_path(module: str) -> Path:
    rel = module.removeprefix(PACKAGE).lstrip(".").replace(".", "/")
    candidate = PACKAGE_DIR / rel
    if candidate.is_dir():
        return candidate / "__init__.py"
    return candidate.with_suffix(".py") if rel else PACKAGE_DIR / "__init__.py"


# an import statement, at any depth (lazy imports inside functions count), with a parenthesized
# list of names over several lines
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.M)


def _import_statements(source: str) -> list[ast.stmt]:
    """The import statements of a module's source, parsed one by one: parsing only these lines
    instead of the whole module makes every Snakemake start (which hashes every rule's code)
    several times faster. A line of prose that looks like an import and is not Python is skipped."""
    statements = []
    for match in _IMPORT.finditer(source):
        try:
            statements += ast.parse(match.group(0).strip()).body
        except SyntaxError:
            continue
    return statements


@lru_cache(maxsize=None)
def package_imports(module: str) -> frozenset[str]:
    """The ethosweep modules that `module` imports directly (read once per process: every rule's
    params ask, and their closures share most modules)."""
    found = set()
    for node in _import_statements(module_path(module).read_text(encoding="utf-8")):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import inside the package
                parent = module.rsplit(".", node.level)[0]
                base = f"{parent}.{base}" if base else parent
            if base == PACKAGE or base.startswith(PACKAGE + "."):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if module_path(sub).exists() and sub != base else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE + "."))
    return frozenset(m for m in found if m != PACKAGE and module_path(m).exists())


@lru_cache(maxsize=None)
def closure(module: str) -> tuple[str, ...]:
    """`module` and every package module it reaches through imports, sorted."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(package_imports(current) - seen)
    return tuple(sorted(seen))


def data_files(module: str) -> tuple[Path, ...]:
    """The package data a module reads beside its source: the files of a templates/ folder next to
    it (the report's Jinja2 templates and stylesheet), so that editing a template reruns its job."""
    folder = module_path(module).parent / "templates"
    return tuple(sorted(p for p in folder.rglob("*") if p.is_file())) if folder.is_dir() else ()


def own_model_modules(import_path: str | None) -> tuple[str, ...]:
    """The ethosweep module an `import:` model is built by (`ethosweep.zoo.deployable:yolo`), as
    a one-tuple; none for a model file, another package's model or a module that does not exist
    (the export stage says so)."""
    module = (import_path or "").partition(":")[0]
    if module.split(".")[0] != PACKAGE or not module_path(module).is_file():
        return ()
    return (module,)


def code_version(*modules: str) -> str:
    """sha256 (shortened) over the source of the modules' import closures and their package data
    (a job running several stages, in order, hashes them all)."""
    digest = hashlib.sha256()
    names = sorted(set().union(*(closure(m) for m in modules)))
    for name in names:
        digest.update(name.encode() + b"\0" + module_path(name).read_bytes() + b"\0")
    for path in sorted(set().union(*(data_files(n) for n in names))):
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
