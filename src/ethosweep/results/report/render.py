"""The report's pages from their data: Jinja2 templates and a stylesheet, package data in
templates/ (one template per page kind, shared blocks in _blocks.html).

Jinja2 is what Python's reporting tools use for this (Snakemake's own report, MultiQC), and it
is in the environment already (torch requires it). Autoescaping is on: every value is text unless
a template marks it safe (the inlined SVGs, the DataTables bundle, the cells' own pages). The
stylesheet is inlined at render time, so a page stays one file that opens without a server.
Undefined names fail the render (StrictUndefined): a misspelt field is an error, not a blank.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from ethosweep.results.picks import said_number
from ethosweep.results.table import number

TEMPLATES = Path(__file__).parent / "templates"


def fmt(value) -> str:
    """A figure as the tables show it: thousands separated when whole and large, else 4 digits."""
    figure = number(value)
    if math.isnan(figure):
        return str(value)
    if figure.is_integer() and abs(figure) >= 1000:
        return f"{int(figure):,}"
    return f"{figure:.4g}"


def ms(value) -> str:
    """A time in ms as `ethosweep picks` says it (picks.said_number), '<0.001' below a microsecond."""
    figure = number(value)
    if math.isnan(figure):
        return ""
    return "<0.001" if figure < 0.001 else said_number(figure)


def commas(value) -> str:
    """A whole number with thousands separated (a blank for none)."""
    return f"{int(number(value, 0)):,}"


def fixed(value, digits: int = 1) -> str:
    return f"{number(value, 0):.{digits}f}"


def percent(fraction) -> str:
    """A fraction 0..1 as '97.8' (the unit is the column's)."""
    return "" if fraction is None else f"{100 * fraction:.1f}"


def css_class(text: str) -> str:
    """A verdict as a class name: 'does not fit' -> 'does-not-fit'."""
    return str(text).replace(" ", "-")


@lru_cache(maxsize=None)
def environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=fmt, ms=ms, commas=commas, fixed=fixed, percent=percent, css_class=css_class)
    env.globals["stylesheet"] = lambda: (TEMPLATES / "report.css").read_text()
    return env


def render(template: str, **data) -> str:
    return environment().get_template(template).render(**data)


def block(name: str, *args) -> str:
    """One macro of _blocks.html, for a fragment another library places (a DataTables cell)."""
    return str(getattr(environment().get_template("_blocks.html").module, name)(*args))


def fragment_of(page: str) -> str:
    """The cell's section of its page (ethosweep.results.report.cells.standalone)."""
    start, end = page.find("<!--cell-->"), page.rfind("<!--/cell-->")
    return page[start + len("<!--cell-->") : end] if start >= 0 and end > start else page
