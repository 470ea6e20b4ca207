"""The report: advice from real numbers, the Pareto front, the page in a real browser."""

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, typed
from ethosweep import advice
from ethosweep.report import pareto_front
from ethosweep.vela import read_per_layer, read_summary

DATA = Path(__file__).parent / "data" / "vela"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_memory_bound_advice_shows_the_numbers_it_comes_from():
    layers = read_per_layer(DATA / "mnist_u55_128_per-layer.csv")
    (fc1,) = advice.memory_bound_layers(layers, top=1)
    assert fc1.title == "Layer tosa_rescale_default_2 (Conv2D) is memory-bound"
    assert fc1.detail.startswith("101,008 cycles, of which 101,008 are off-chip flash accesses against 15,796 NPU compute cycles")


def test_weight_streaming_advice_points_at_a_better_memory_mode_of_the_same_sweep():
    figures = read_summary(DATA / "mnist_u55_128_summary_Ethos_U55_High_End_Embedded.csv")
    sram_only = {"cycles_total": 52433, "sram_memory_used": 15.3, "on_chip_flash_memory_used": 105.5}
    (tip,) = advice.weight_streaming({"memory_mode": "Shared_Sram"}, figures, {"Sram_Only": sram_only})
    assert tip.title == "77 % of the time waits for off-chip flash"
    assert "In this sweep Sram_Only takes 52,433 cycles (2.6× fewer)" in tip.detail
    assert advice.weight_streaming({"memory_mode": "Sram_Only"}, {"cycles_total": 100, "cycles_off_chip_flash_access": 10}, {}) == []


def test_pareto_front():
    points = [(1.0, 10.0), (2.0, 5.0), (3.0, 6.0), (0.5, 20.0), (2.0, 5.0)]
    assert pareto_front(points) == [0, 1, 3, 4]


def test_the_report_has_real_numbers_plots_and_advice(tiny_sweep):
    page = (tiny_sweep / "results/report/index.html").read_text()
    assert page.count("<svg") >= 4
    assert "138,824" in page  # the seed MNIST cell's Vela cycles, in the table and its detail
    assert "77 % of the time waits for off-chip flash" in page
    assert "aten_avg_pool2d_default runs on the CPU" in page and "kernel dims &lt; 8, got [24, 5]" in page
    assert "does not fit" in page  # MNIST on the 16 KiB test board
    with open(tiny_sweep / "results/summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    digits = next(r for r in rows if r["model"] == "mnist_digits")
    assert f"{100 * float(digits['top1_npu']):.1f}%" in page


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); .ci/run installs it")
def test_the_report_opens_in_headless_chromium(tiny_sweep, tmp_path):
    index = tiny_sweep / "results/report/index.html"
    dom = subprocess.run([CHROMIUM, *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", index.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0
    assert len(re.findall(r"<svg", dom.stdout)) >= 4 and "ethosweep report" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,2000",
                    f"--screenshot={shot}", index.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_snakemakes_own_report_builds(tiny_sweep, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(tiny_sweep, work, symlinks=True)
    command = "uv run snakemake --report report.zip"  # exactly as the README writes it
    assert f"`{command}`" in (REPO / "README.md").read_text()
    built = typed(command, work)
    assert built.returncode == 0, built.stderr[-3000:]
    listing = subprocess.run(["python3", "-m", "zipfile", "-l", str(work / "report.zip")], capture_output=True, text=True).stdout
    for plot in ("cycles.svg", "fit.svg", "roofline.svg", "pareto.svg", "index.html"):
        assert plot in listing
    assert listing.count("Shared_Sram.html") == 6  # a detail page per cell, labelled by model/target/memory mode
