"""flowcon.textfile: the line of the first non-UTF-8 byte; deep YAML as a YAMLError."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flowcon.textfile import NotText, read_text, safe_load_yaml


def test_read_text_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\nb: 2\nc: \xff\n")
    with pytest.raises(NotText, match=r"^line 3: not UTF-8 text \(byte 0xff\)$"):
        read_text(path)
    path.write_bytes("a: é\n".encode())
    assert read_text(path) == "a: é\n"
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "missing")


def test_deep_yaml_is_a_yaml_error_not_a_recursion_error() -> None:
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        safe_load_yaml("[" * 900 + "]" * 900)
    assert safe_load_yaml("[[1]]") == [[1]]
