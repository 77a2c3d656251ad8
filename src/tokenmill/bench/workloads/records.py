"""Read a dataset file as (location, JSON value) records.

A location names where a record came from, for errors: 'file:line' for JSON
Lines, 'file: entry N' for a JSON list. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def read_records(path: str | Path, allow_json_list: bool = False) -> Iterator[tuple[str, object]]:
    """Records of a JSON Lines file, or of a JSON list when ``allow_json_list``
    and the file starts with '['. ValueError (prefixed 'dataset:' when the file
    itself is missing or unreadable, else its location) for bad input."""
    text = _read_text(Path(path))
    if allow_json_list and text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        for i, entry in enumerate(entries):
            yield f"{path}: entry {i}", entry
        return
    # split("\n"), not splitlines(): JSON strings may hold U+2028 and other
    # characters that splitlines() breaks on, which would shift line numbers.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg} (column {exc.colno})") from exc
        yield f"{path}:{number}", record


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise ValueError(f"dataset: no such file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
