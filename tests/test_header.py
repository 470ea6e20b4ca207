"""The C header must compile, and the bytes it puts in the image must be the .pte's."""

import shutil
import subprocess
from pathlib import Path

import pytest

from ethosweep.deploy.c_array import render_header
from ethosweep.matrix.cell import symbol_for

CROSS = shutil.which("arm-none-eabi-gcc")
COMPILER = CROSS or shutil.which("gcc")
OBJCOPY = shutil.which("arm-none-eabi-objcopy") if CROSS else shutil.which("objcopy")


def section_bytes(header: Path, tmp_path: Path) -> bytes:
    """Compile the header in a C file and extract network_model_sec from the object."""
    source = tmp_path / "model.c"
    source.write_text(f'#include "{header}"\n')
    obj = tmp_path / "model.o"
    flags = ["-mcpu=cortex-m55", "-mthumb"] if CROSS else []
    subprocess.run([COMPILER, *flags, "-std=c99", "-Wall", "-Werror", "-c", str(source), "-o", str(obj)], check=True)
    raw = tmp_path / "section.bin"
    subprocess.run([OBJCOPY, "-O", "binary", "--only-section=network_model_sec", str(obj), str(raw)], check=True)
    return raw.read_bytes()


def test_symbol_is_a_c_identifier_derived_from_the_cell():
    symbol = symbol_for("mnist", "int8", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert symbol == "mnist_int8_ethos_u55_128_ethos_u55_high_end_embedded_shared_sram_pte"
    assert symbol_for("3d-net") == "m_3d_net_pte"


@pytest.mark.skipif(COMPILER is None or OBJCOPY is None, reason="needs gcc (or arm-none-eabi-gcc) and objcopy")
def test_header_compiles_and_holds_exactly_the_bytes(tmp_path):
    data = bytes(range(256)) * 3 + b"\x00\x01\x02"  # not a multiple of 16
    header = tmp_path / "model_pte.h"
    header.write_text(render_header(data, "demo_pte", origin="test"))
    text = header.read_text()
    assert "#define DEMO_PTE_LEN 771u" in text
    assert '__attribute__((section("network_model_sec"), aligned(16)))' in text
    assert section_bytes(header, tmp_path) == data
