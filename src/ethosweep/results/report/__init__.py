"""The report: the sweep at a glance, plots, a page per cell, one self-contained HTML page.

Data and presentation apart: the modules build plain data (glance.py: the first screen; cells.py:
a cell's page; index.py: the page's sections; plots.py: the SVG figures) and Jinja2 templates
with a stylesheet (templates/, package data) render it (render.py). The page needs no server,
no network and no JavaScript of ours. Torch-free.
"""

from ethosweep.results.report.cells import cell_detail, cpu_part_text, layout_text, write_cell_reports
from ethosweep.results.report.index import write_index
from ethosweep.results.report.plots import pareto_front, read_plot, write_plots

__all__ = [
    "cell_detail",
    "cpu_part_text",
    "layout_text",
    "pareto_front",
    "read_plot",
    "write_cell_reports",
    "write_index",
    "write_plots",
]
