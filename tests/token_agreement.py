"""Token agreement of a result with a reference (the GGUF quantization tests): 1 - edit distance / length."""
from __future__ import annotations


def token_edits(got: list, want: list) -> int:
    """Levenshtein distance between two token sequences (insertions, deletions, substitutions)."""
    row = list(range(len(want) + 1))
    for i, x in enumerate(got, 1):
        diag, row[0] = row[0], i
        for j, y in enumerate(want, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (x != y))
    return row[len(want)]


def agreement_one(got: list, want: list) -> float:
    """1 - edit distance / reference length (the length counted as at least 1)."""
    return 1.0 - token_edits(got, want) / max(1, len(want))


def agreement(got: list[list], want: list[list]) -> float:
    """1 - summed edit distance / summed reference length, over clip pairs; 1.0 for an empty reference."""
    total = sum(len(w) for w in want)
    edits = sum(token_edits(g, w) for g, w in zip(got, want))
    return 1.0 - edits / total if total else float(edits == 0)
