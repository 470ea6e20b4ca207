"""The report: advice from real numbers, the Pareto front, the page in a real browser."""

import csv
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DOCS, REPO, typed
from ethosweep.results import advice
from ethosweep.results.report import plots
from ethosweep.results.report.figures import pareto_front
from ethosweep.vela.partitions import read_per_layer, read_summary

DATA = Path(__file__).parent / "data" / "vela"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_memory_bound_advice_shows_the_numbers_it_comes_from():
    layers = read_per_layer(DATA / "mnist_u55_128_per-layer.csv")
    (fc1,) = advice.memory_bound_layers(layers, top=1)
    assert fc1.title == "Layer tosa_rescale_default_2 (Conv2D) is memory-bound"
    assert fc1.detail.startswith(
        "101,008 cycles, of which 101,008 are off-chip flash accesses against 15,796 NPU compute cycles"
    )


def test_weight_streaming_advice_points_at_a_better_memory_mode_of_the_same_sweep():
    figures = read_summary(DATA / "mnist_u55_128_summary_Ethos_U55_High_End_Embedded.csv")
    sram_only = {"cycles_total": 52433, "sram_memory_used": 15.3, "on_chip_flash_memory_used": 105.5}
    (tip,) = advice.weight_streaming({"memory_mode": "Shared_Sram"}, figures, {"Sram_Only": sram_only})
    assert tip.title == "77 % of the time waits for off-chip flash"
    assert "In this sweep Sram_Only takes 52,433 cycles (2.6× fewer)" in tip.detail
    assert (
        advice.weight_streaming(
            {"memory_mode": "Sram_Only"}, {"cycles_total": 100, "cycles_off_chip_flash_access": 10}, {}
        )
        == []
    )


def test_pareto_front():
    points = [(1.0, 10.0), (2.0, 5.0), (3.0, 6.0), (0.5, 20.0), (2.0, 5.0)]
    assert pareto_front(points) == [0, 1, 3, 4]


def test_a_matrix_where_no_cell_compiled_still_gets_its_plots(tiny_sweep, tmp_path):
    with open(tiny_sweep / "results/summary.csv", newline="") as f:
        reader = csv.DictReader(f)
        fields, row = reader.fieldnames, next(reader)
    failed = {k: "" for k in fields} | {k: row[k] for k in ("model", "quantization", "target", "memory_mode")}
    summary = tmp_path / "summary.csv"
    with open(summary, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerow(failed | {"status": "failed", "reason": "vela: Vela refused it"})
    outputs = {name: str(tmp_path / f"{name}.svg") for name in ("cycles", "fit", "roofline", "pareto")}
    plots.write_plots(str(summary), {}, **outputs)
    for name in ("cycles", "roofline", "pareto"):
        assert "No cell compiled" in Path(outputs[name]).read_text()


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
    assert f"{100 * float(digits['top1_npu']):.1f} % on the NPU path" in page  # the accuracy cost, in What to pick


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); .ci/run installs it")
def test_the_report_opens_in_headless_chromium(tiny_sweep, tmp_path):
    index = tiny_sweep / "results/report/index.html"
    dom = subprocess.run(
        [CHROMIUM, *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", index.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0
    assert len(re.findall(r"<svg", dom.stdout)) >= 4 and "ethosweep report" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1300,2000",
            f"--screenshot={shot}",
            index.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_snakemakes_own_report_builds(tiny_sweep, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(tiny_sweep, work, symlinks=True)
    command = "uv run snakemake --report report.zip"  # exactly as docs/report.md writes it
    assert f"`{command}`" in DOCS["docs/report.md"]
    built = typed(command, work)
    assert built.returncode == 0, built.stderr[-3000:]
    listing = subprocess.run(
        ["python3", "-m", "zipfile", "-l", str(work / "report.zip")], capture_output=True, text=True
    ).stdout
    for plot in ("cycles.svg", "fit.svg", "roofline.svg", "pareto.svg", "index.html"):
        assert plot in listing
    assert listing.count("Shared_Sram.html") == 6  # a detail page per cell, labelled by model/target/memory mode


# ---- what to pick ---------------------------------------------------------------------------


def summary(tiny_sweep) -> list[dict]:
    with open(tiny_sweep / "results/summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def board_params(name: str) -> dict:
    import yaml

    from ethosweep.matrix.boards import board_from_profile

    path = REPO / "boards" / f"{name}.yaml" if name != "tiny-board" else REPO / ".test/data/tiny_board.yaml"
    return board_from_profile(yaml.safe_load(path.read_text()), str(path)).as_params()


def test_picks_for_a_board_rest_on_the_summarys_numbers(tiny_sweep):
    from ethosweep.results import picks

    rows = summary(tiny_sweep)
    (alif, tiny) = picks.board_sections(
        rows, {"alif-e8": board_params("alif-e8"), "tiny-board": board_params("tiny-board")}
    )
    assert alif.summary == "4 of 4 models fit"
    mnist = next(p for p in alif.picks if p.model == "mnist")
    row = next(r for r in rows if (r["model"], r["board"]) == ("mnist", "alif-e8"))
    assert mnist.verdict == "fits" and mnist.row is row or mnist.row == row
    assert mnist.text.startswith(
        f"fastest that fits: Shared_Sram, {float(row['board_inference_ms']):.3g} ms (Vela estimate "
        f"at the board's clock), margin SRAM {float(row['fit_sram_margin_kib']):,.0f} KiB"
    )
    digits = next(p for p in alif.picks if p.model == "mnist_digits")
    d = next(r for r in rows if (r["model"], r["board"]) == ("mnist_digits", "alif-e8"))
    assert digits.text.endswith(
        f"top-1 {100 * float(d['top1_float']):.1f} % float → {100 * float(d['top1_npu']):.1f} % "
        f"on the NPU path ({d['data']})"
    )
    # the 16 KiB test board: MNIST does not fit anywhere, and the page says so with the closest miss
    assert tiny.summary == "1 of 4 models fit"
    mnist = next(p for p in tiny.picks if p.model == "mnist")
    t = next(r for r in rows if (r["model"], r["board"]) == ("mnist", "tiny-board"))
    assert mnist.verdict == "does not fit"
    assert (
        mnist.text
        == f"does not fit in any memory mode; closest: Shared_Sram, {t['fit'].removeprefix('does not fit: ')}"
    )


def test_a_sweep_of_thousands_ends_on_the_cells_per_task_and_the_boards_not_a_row_per_cell(tiny_sweep):
    from ethosweep.results.terminal import TABLE_ROWS, format_table

    rows = summary(tiny_sweep)
    assert len(format_table(rows).splitlines()) > len(rows)  # a small sweep: a line per row
    # the tiny sweep's 10 rows (6 cells, ds_cnn partly on the CPU on Ethos-U55) as 25 models' worth,
    # in two tasks: past TABLE_ROWS the end of the run counts them instead
    copies = [
        {**r, "model": f"{r['model']}_{i}", "cell": "", "task": ("classification", "keyword spotting")[i % 2]}
        for i in range(25)
        for r in rows
    ]
    assert len(copies) > TABLE_ROWS
    text = format_table(copies)
    lines = text.splitlines()
    assert lines[0].startswith("250 rows: the cells per task and what fits each board")
    task_line = re.compile(r"(classification|keyword spotting)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+0\s+0\s+0\s+0$")
    counts = {m.group(1): tuple(map(int, m.groups()[1:])) for m in map(task_line.match, lines) if m}
    # models, cells, whole, partly on the CPU (then none by fallback, will not run, does not fit, failed):
    # 13 and 12 copies of 4 models and 6 cells (5 whole)
    assert counts == {"classification": (52, 78, 65, 13), "keyword spotting": (48, 72, 60, 12)}, text
    assert "  alif-e8 (ethos-u55-128): 100 of 100 models fit" in lines
    assert "  tiny-board (ethos-u55-128): 25 of 100 models fit" in lines  # only `add` fits its 16 KiB
    assert "150 of 150 cells ok (250 rows: a cell appears once per board it is on)" in text
    assert "does not fit: " not in text and len(lines) < 20  # no line per misfit or per cell


def test_a_refusal_of_one_model_on_twenty_configurations_is_one_line_under_the_table(tiny_sweep):
    """Vela's refusal names the cell it compiled ('in partition 0 on ethos-u55-32 / Sram_Only') and
    the record cuts it at 400 characters, at a place that moves with the cell's name: at 6,000 cells
    the deployed zoo's 20 refusals of one model printed 20 lines each, 125 in all, instead of 20."""
    from ethosweep.results.terminal import format_table
    from ethosweep.runtime.errors import StageError
    from ethosweep.runtime.execute import one_line

    (row,) = [r for r in summary(tiny_sweep) if (r["model"], r["board"]) == ("mnist", "alif-e8")]
    named = ", ".join(f"stages.{i}.transformer.attn" for i in range(11))  # long enough to be cut at the cell
    said = "Non-passthrough operation (Conv2D) could not run on NPU (found by Vela on parts of it)"
    failed = [
        {
            **row,
            **{"target": f"ethos-u55-{macs}", "memory_mode": mode, "board": "", "status": "failed"},
            "reason": "vela: "
            + one_line(
                StageError(f"Vela 5.1.0 cannot compile {named} in partition 0 on ethos-u55-{macs} / {mode}: {said}")
            ),
        }
        for macs in (32, 64, 128, 256)
        for mode in ("Sram_Only", "Shared_Sram")
    ]
    assert all(r["reason"].endswith("...") for r in failed) and len({r["reason"] for r in failed}) == 8
    (line,) = [x for x in format_table(failed).splitlines() if x.startswith("  failed: mnist [int8]")]
    assert line.startswith(
        "  failed: mnist [int8] on 8 cells (ethos-u55-32 / Sram_Only, ethos-u55-32 / Shared_Sram, "
        f"ethos-u55-64 / Sram_Only and 5 more): vela: Vela 5.1.0 cannot compile {named}"
    ), line
    # one cell alone: its own reason, as its record says it
    (line,) = [x for x in format_table(failed[:1]).splitlines() if x.startswith("  failed: mnist [int8]")]
    assert line == f"  failed: mnist [int8] ethos-u55-32 / Sram_Only: {failed[0]['reason']}"


def test_a_model_swept_in_two_schemes_names_the_scheme_of_each_memory_mode(tiny_sweep):
    from ethosweep.results import picks

    # the tiny sweep's MNIST on the Alif E8, as if it had been swept in a16w8 too (a slower copy)
    (row,) = [r for r in summary(tiny_sweep) if (r["model"], r["board"]) == ("mnist", "alif-e8")]
    a16w8 = {**row, "quantization": "a16w8", "board_inference_ms": str(2 * float(row["board_inference_ms"]))}
    pick = picks.board_pick("mnist", [row, a16w8], None)
    assert pick.row is row and pick.text.startswith("fastest that fits: int8 Shared_Sram, ")
    assert pick.text.endswith("; fits in int8 Shared_Sram, a16w8 Shared_Sram"), pick.text


def test_a_model_on_no_board_swept_in_two_schemes_names_the_scheme_of_each_configuration(tiny_sweep):
    from ethosweep.results import picks

    # the tiny sweep's MNIST on the U85 (on no board), as if swept in a16w8 too (a slower copy)
    (row,) = [r for r in summary(tiny_sweep) if (r["model"], r["target"], r["board"]) == ("mnist", "ethos-u85-256", "")]
    a16w8 = {**row, "quantization": "a16w8", "vela_inference_ms": str(2 * float(row["vela_inference_ms"]))}
    pick = picks.bare_pick("mnist", [row, a16w8], budget_ms=None)
    assert pick.row is row and pick.text.startswith("fastest: int8 ethos-u85-256 / Shared_Sram, "), pick.text
    # one scheme: the configuration alone, as before
    assert picks.bare_pick("mnist", [row], None).text.startswith("fastest: ethos-u85-256 / Shared_Sram, ")


def test_a_budget_nobody_meets_is_said_not_papered_over(tiny_sweep):
    from ethosweep.results import picks

    # add is one operator, 1-2 NPU cycles (1e-06 ms at 1 GHz): a budget it misses is not worth testing
    rows = [r for r in summary(tiny_sweep) if r["model"] != "add"]
    (alif,) = picks.board_sections(rows, {"alif-e8": board_params("alif-e8")}, budget_ms=1e-6)
    assert alif.summary == "3 of 3 models fit; 0 within 1e-06 ms"
    assert all(p.verdict == "misses budget" and "misses the 1e-06 ms budget by" in p.text for p in alif.picks)
    bare = picks.bare_section(rows, budget_ms=1e-6)
    assert bare.summary == "0 of 1 models within 1e-06 ms"  # mnist is on no board on the U85
    assert all("no configuration of the sweep is within the 1e-06 ms budget" in p.text for p in bare.picks)
    # a budget the U85 meets: the smallest NPU meeting it is named, with its numbers
    mnist = next(r for r in rows if (r["model"], r["target"], r["board"]) == ("mnist", "ethos-u85-256", ""))
    bare = picks.bare_section(rows, budget_ms=float(mnist["vela_inference_ms"]) * 1.01)
    pick = next(p for p in bare.picks if p.model == "mnist")
    assert pick.verdict == "meets budget" and "smallest NPU within" in pick.text
    assert f"ethos-u85-256 / Shared_Sram (256 MACs/cycle, {float(mnist['vela_inference_ms']):.3g} ms)" in pick.text


def test_a_cell_of_a_few_cycles_is_not_said_to_take_no_time(tiny_sweep):
    """add is one operator, a few NPU cycles: its time has three significant figures, not "0.0 ms"."""
    from ethosweep.results import picks

    rows = summary(tiny_sweep)
    add = [r for r in rows if r["model"] == "add" and r["status"] == "ok"]
    assert add
    for row in add:
        seconds = int(row["vela_cycles_total"]) / (float(row["vela_core_clock_mhz"]) * 1e6)
        assert float(row["vela_inference_ms"]) > 0
        assert float(row["vela_inference_ms"]) == pytest.approx(1e3 * seconds, rel=5e-3)
        if row["board"]:
            assert 0 < float(row["board_inference_ms"]) < 1e-4
    pick = next(p for p in picks.bare_section([r for r in add if not r["board"]]).picks)
    cycles = int(pick.row["vela_cycles_total"])
    assert " 0 ms" not in pick.text and f"under 0.001 ms, {cycles:,} cycles (Vela estimate)" in pick.text


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); .ci/run installs it")
def test_the_table_sorts_and_filters_in_headless_chromium(tiny_sweep, tmp_path):
    from playwright.sync_api import sync_playwright

    rows = summary(tiny_sweep)
    index = tiny_sweep / "results/report/index.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[a for a in HEADLESS if a != "--headless"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(index.as_uri())
        body = page.locator("table#cells tbody tr")
        body.first.wait_for()
        assert body.count() == len(rows) == 10
        # filter: the search box keeps the rows that mention the text
        page.fill(".dt-search input", "ethos-u85-256")
        page.wait_for_timeout(300)
        shown = body.all_inner_texts()
        assert len(shown) == sum(1 for r in rows if r["target"] == "ethos-u85-256") == 2
        assert all("ethos-u85-256" in text for text in shown)
        page.fill(".dt-search input", "")
        # sort: a click on the header orders the rows by Vela's cycles, smallest first
        page.locator(".dt-scroll-head th", has_text="Vela cycles").click()  # the visible header (scrollX)
        page.wait_for_timeout(300)
        first = body.first.inner_text()
        smallest = min(rows, key=lambda r: float(r["vela_cycles_total"]))
        assert first.split("\t")[0] == smallest["model"]
        browser.close()


def shown_ms(value: float) -> str:
    if value < 0.001:
        return "<0.001"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"  # 1,750 ms, never 1.75e+03


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); .ci/run installs it")
def test_the_first_screen_is_the_sweep_and_a_table_per_board_with_the_summarys_numbers(tiny_sweep, tmp_path):
    """What a browser shows first, held to summary.csv: the matrix's times are the cells' Vela
    times, and every number of a board's row is its cell's summary field on that board (SRAM and
    flash used: the board's size minus the summary's margin)."""
    from playwright.sync_api import sync_playwright

    rows = summary(tiny_sweep)
    on_board = {(r["cell"], r["board"]): r for r in rows}
    sizes = {name: board_params(name)["sizes_kib"] for name in ("alif-e8", "tiny-board")}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[a for a in HEADLESS if a != "--headless"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((tiny_sweep / "results/report/index.html").as_uri())
        # the first screen: the whole sweep in one picture, and the first board's table begun
        assert page.locator("#sweep-matrix").bounding_box()["y"] < 900
        assert page.locator("table.glance").first.bounding_box()["y"] < 900
        matrix = page.locator("#sweep-matrix td[data-cell]")
        assert matrix.count() == len({r["cell"] for r in rows if r["status"] == "ok"})
        for i in range(matrix.count()):
            td = matrix.nth(i)
            row = next(r for r in rows if r["cell"] == td.get_attribute("data-cell"))
            assert float(td.get_attribute("data-value")) == float(row["vela_inference_ms"])
            assert td.inner_text().split()[0] == shown_ms(float(row["vela_inference_ms"]))
            assert ("+CPU" in td.inner_text()) == (int(row["cpu_ops"]) > 0)
        checked = 0
        for board in ("alif-e8", "tiny-board"):
            table = page.locator(f'table.glance[data-board="{board}"]')
            models = {r["model"] for r in rows if r["board"] == board}
            assert table.locator("tr[data-model]").count() == len(models)
            for tr in table.locator("tr[data-cell]").all():
                row = on_board[tr.get_attribute("data-cell"), board]
                assert tr.get_attribute("data-model") == row["model"]
                for td in tr.locator("td[data-field]").all():
                    field, value, text = td.get_attribute("data-field"), td.get_attribute("data-value"), td.inner_text()
                    assert float(value) == float(row[field]), (board, row["cell"], field)
                    if field == "board_inference_ms":
                        assert text.split()[0] == shown_ms(float(row[field]))
                    elif field.startswith("fit_"):
                        used = sizes[board][field.split("_")[1]] - float(row[field])
                        assert text.startswith(f"{used:.1f} (margin {float(row[field]):.1f})"), text
                    elif field == "cpu_ops":
                        assert text == row["cpu_ops"]
                    elif field == "top1_npu":
                        assert text == f"{100 * float(row['top1_float']):.1f} → {100 * float(row['top1_npu']):.1f}"
                    checked += 1
                fits = tr.locator("td").nth(1).inner_text()
                assert fits.startswith("yes" if row["fit"] == "fits" else "no"), fits
        assert checked >= 20
        page.screenshot(path=str(tmp_path / "first-screen.png"))
        browser.close()


def test_the_picks_say_the_same_as_before_in_their_tables(tiny_sweep):
    """The tables replace the picks' sentences on the first screen, not their facts: every pick's
    sentence (picks.py, with every number) is behind its row, and the best time is marked."""
    from ethosweep.results import picks

    rows = summary(tiny_sweep)
    page = (tiny_sweep / "results/report/index.html").read_text()
    boards = {"alif-e8": board_params("alif-e8"), "tiny-board": board_params("tiny-board")}
    sections = picks.board_sections(rows, boards)
    for section in sections:
        for pick in section.picks:
            assert html.escape(pick.text, quote=False).replace("'", "&#39;").replace('"', "&#34;") in page, pick.text
    alif = page[page.index('data-board="alif-e8"') : page.index('data-board="tiny-board"')]
    fastest = min((r for r in rows if r["board"] == "alif-e8"), key=lambda r: float(r["board_inference_ms"]))
    best = re.search(r'<tr class="[^"]*" data-model="([^"]+)"[^>]*>(?:(?!</tr>).)*class="l time best"', alif, re.S)
    assert best and best.group(1) == fastest["model"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium on PATH (apt-get install chromium)")
def test_the_readmes_screenshot_script_renders_a_reports_first_screen(tiny_sweep, tmp_path):
    import struct
    import zlib

    png = tmp_path / "report.png"
    proc = subprocess.run(
        [sys.executable, str(REPO / "docs" / "screenshot.py"), str(tiny_sweep / "results/report/index.html"), str(png)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 900)
    # not a blank page: the decoded pixels hold more than one colour
    idat = b"".join(
        data[i + 8 : i + 8 + struct.unpack(">I", data[i : i + 4])[0]]
        for i in _chunks(data)
        if data[i + 4 : i + 8] == b"IDAT"
    )
    assert len(set(zlib.decompress(idat)[:200_000])) > 10
    # the committed picture is such a screenshot, of the default matrix's report
    assert struct.unpack(">II", (REPO / "docs/images/report.png").read_bytes()[16:24]) == (1280, 900)


def _chunks(data: bytes):
    """The offsets of a PNG's chunks."""
    import struct

    offset = 8
    while offset < len(data):
        yield offset
        offset += 12 + struct.unpack(">I", data[offset : offset + 4])[0]


def test_the_sweep_matrix_has_a_row_per_scheme_when_there_are_several():
    """With int8 and a16w8 in one sweep, each model has a row per scheme: one scheme's cells must not
    hide the other's (a detector's a16w8 cells that will not run hid its int8 times)."""
    from ethosweep.results.report.glance import sweep_matrix

    def row(quant, target, status, ms):
        return {
            "model": "yolo11n",
            "quantization": quant,
            "target": target,
            "system_config": "s",
            "memory_mode": "Shared_Sram",
            "vela_version": "5.1.0",
            "board": "",
            "status": status,
            "vela_inference_ms": ms,
            "cpu_ops": "0",
        }

    rows = [row("int8", "ethos-u55-128", "ok", "10.04"), row("a16w8", "ethos-u55-128", "will not run", "14.41")]
    matrix = sweep_matrix(rows)
    assert [r["model"] for r in matrix["rows"]] == ["yolo11n [int8]", "yolo11n [a16w8]"]
    (int8,), (a16w8,) = (r["cells"] for r in matrix["rows"])
    assert (int8["ms"], int8["marks"], a16w8["ms"], a16w8["marks"]) == (10.04, [], None, ["failed"])
    assert [r["model"] for r in sweep_matrix(rows[:1])["rows"]] == ["yolo11n"]  # one scheme: as before
