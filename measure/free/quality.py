"""Output quality of an approximate decoder: agreement with greedy's tokens and ROUGE-L.

ROUGE-L (Lin, 2004) is the F-measure of the longest common subsequence (LCS) of two token
sequences: P = LCS / len(candidate), R = LCS / len(reference), F = 2 P R / (P + R) (beta = 1).
Texts are compared as lower-cased
word tokens (``words``); token-id sequences can be passed directly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from numbers import Integral

from ppdmodel.validation import items_of

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters, digits, underscore)."""
    return _WORD.findall(text.lower())


def lcs_length(a: Sequence, b: Sequence) -> int:
    """Length of the longest common subsequence of a and b (O(len a * len b), one row)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b, start=1):
            cur = row[j]
            row[j] = prev + 1 if x == y else max(row[j], row[j - 1])
            prev = cur
    return row[-1]


def _units(name: str, value) -> list:
    """What ROUGE-L compares: the words of a text, or the items of a token sequence (ids or
    strings; an array or tensor as its list); ValueError naming ``name`` otherwise."""
    if isinstance(value, str):
        return words(value)
    items = items_of(value.tolist() if hasattr(value, "tolist") else value)
    ok = items is not None and all(
        isinstance(x, Integral | str) and not isinstance(x, bool) for x in items
    )
    if not ok:
        raise ValueError(f"{name} must be a text or a sequence of token ids, got {value!r:.80}")
    return items


def rouge_l(candidate, reference) -> float:
    """ROUGE-L F1 in [0, 1] of two texts (compared by ``words``) or two token sequences."""
    candidate, reference = _units("candidate", candidate), _units("reference", reference)
    if not candidate or not reference:
        return float(len(candidate) == len(reference))
    lcs = lcs_length(candidate, reference)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(candidate), lcs / len(reference)
    return 2 * precision * recall / (precision + recall)


def token_agreement(tokens: Sequence[int], greedy: Sequence[int]) -> float:
    """Fraction of positions t < len(greedy) where tokens[t] == greedy[t] (a missing token
    counts as a disagreement); 1.0 exactly when the outputs are equal."""
    if not greedy:
        return float(not tokens)
    same = sum(a == b for a, b in zip(tokens, greedy, strict=False))
    return same / max(len(greedy), len(tokens))
