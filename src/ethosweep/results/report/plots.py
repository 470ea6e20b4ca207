"""The report's four figures, one job: from the summary, each to its SVG (ethosweep.results.report.figures
draws them). Torch-free."""

from __future__ import annotations

from ethosweep.results.report.figures import plot_cycles, plot_fit, plot_pareto, plot_roofline
from ethosweep.results.table import primary_rows, read_summary_csv
from ethosweep.runtime.io import atomic_write_text


def write_plots(summary: str, boards: dict[str, dict], cycles: str, fit: str, roofline: str, pareto: str) -> None:
    """The report's four figures from the summary, each to its path."""
    rows = primary_rows(read_summary_csv(summary))  # one figure per cell: the installed Vela's
    atomic_write_text(cycles, plot_cycles(rows))
    atomic_write_text(fit, plot_fit(rows, boards))
    atomic_write_text(roofline, plot_roofline(rows))
    atomic_write_text(pareto, plot_pareto(rows))
