"""Streaming text that may end inside a marker (``</think>``, ``<tool_call>``)."""

from __future__ import annotations


def partial_marker_len(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper prefix of ``marker``
    (0 if none): the characters a stream must hold back, since the next delta
    may complete the marker."""
    for k in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0
