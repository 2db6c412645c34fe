"""A person is one person however their id is spelled: the rule that turns a stored id into a person.

Under the user privacy unit every row of one *person* is bounded together (``user_shuffle``), so two
spellings of one id that the lake's writers produced by accident (``HEAVY``, `` HEAVY``, ``heavy``,
``HEAVY\\u200b`` across files) must not become two people: each would keep k rows, and the person
would weigh several times k in the fit. A text id is therefore normalised before it is hashed or
counted, everywhere (the shuffle's scatter, ``convert --user``'s person sample, validation's checks and
merge count, the ``"auto"`` bound's histogram, which counts the scatter's hashes):

1. Unicode NFKC (compatibility forms, e.g. a full-width ``Ｈ`` or a no-break space, become plain ones);
2. every format character removed (Unicode category Cf: the zero-width space, joiners, word joiner,
   byte-order mark, soft hyphen, bidirectional marks);
3. surrounding whitespace stripped (``str.strip``: Unicode whitespace);
4. with case folding (``privacy.user_id_case_fold``, default on) ``str.casefold`` and NFKC again, so
   ``Straße`` and ``STRASSE`` are one person; off, ``heavy`` and ``HEAVY`` stay two people.

The in-memory estimators apply the same rule, with case folding, to text ``groups`` (pass integer
codes to keep case apart). An integer (or binary) id column is used as stored: its values have one spelling each. An id the rule
leaves empty (only spaces or invisible characters) is a missing id and is refused like a null.

The rule's name (``id_rule``, e.g. ``nfkc+strip+drop-format+casefold``) is recorded in a user-level
shuffle's manifest, and a generation made under another rule is never reused silently. Normalising is
per distinct value: ASCII values (the common case, whose NFKC form is themselves and which hold no
format character) vectorised with Arrow, the others one Python call each (``normalise_id``, the
reference the vectorised path agrees with exactly). Case folding may merge the ids of two different
people that differ only in case; that makes them one person (a coarser unit, still within its bounds).
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "AS_STORED",
    "id_rule",
    "is_text",
    "normalise_id",
    "normalise_ids",
    "normalised_uniques",
    "missing_ids",
    "people_of",
]

TEXT_RULE = "nfkc+strip+drop-format"
CASE_FOLD = "+casefold"
AS_STORED = "as-stored"  # an integer or binary id column, and the shuffles made before ids were normalised

# What ``str.strip`` removes from an ASCII string: Arrow's own whitespace sets differ (\x1c-\x1f).
_ASCII_SPACE = "".join(chr(c) for c in range(128) if chr(c).isspace())


def is_text(kind: pa.DataType) -> bool:
    """Whether an id column of type ``kind`` holds text (normalised) rather than numbers or bytes."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def id_rule(case_fold: bool, kind: pa.DataType | None = None) -> str:
    """The name of the rule that forms a person from an id of type ``kind`` (None: a text id)."""
    if kind is not None and not is_text(kind):
        return AS_STORED
    return TEXT_RULE + (CASE_FOLD if case_fold else "")


def normalise_id(text: str, case_fold: bool = True) -> str:
    """The person one stored text id names (module docstring): the reference rule, one value."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(char for char in text if unicodedata.category(char) != "Cf").strip()
    return unicodedata.normalize("NFKC", text.casefold()) if case_fold else text


def normalise_ids(values: pa.Array | pa.ChunkedArray, case_fold: bool = True) -> pa.Array:
    """``normalise_id`` of every value of a text array (nulls stay null); any other array as it is.
    Meant for distinct values (a dictionary, ``pc.unique``): the non-ASCII ones cost a Python call each."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if not is_text(values.type) or len(values) == 0:
        return values
    if pa.types.is_string_view(values.type):
        values = values.cast(pa.string())
    out = pc.utf8_trim(values, characters=_ASCII_SPACE)
    if case_fold:
        out = pc.ascii_lower(out)
    other = pc.invert(pc.fill_null(pc.string_is_ascii(values), True))
    if pc.any(other).as_py():
        texts = values.filter(other).to_pylist()
        out = pc.replace_with_mask(
            out, other, pa.array([normalise_id(text, case_fold) for text in texts], values.type)
        )
    return out


def normalised_uniques(values: Any, case_fold: bool = True) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(the distinct stored values, each one's normalised form, every row's index into them) of an id
    column: the rule applied once per distinct value (Arrow's hash table, no Python object per row)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    encoded = values.dictionary_encode()
    uniques = encoded.dictionary
    # A null row's index is 0: the caller masks it (``missing_ids``).
    indices = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return uniques, normalise_ids(uniques, case_fold), indices


def missing_ids(values: Any) -> np.ndarray:
    """True for the rows without a person: a null id, or a text id the rule leaves empty (``""``, only
    spaces, only invisible characters). Case folding never empties an id, so it is not asked for."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    missing = values.is_null().to_numpy(zero_copy_only=False)
    if not is_text(values.type) or len(values) == 0:
        return missing
    uniques, normalised, indices = normalised_uniques(values, case_fold=False)
    empty = pc.fill_null(pc.equal(normalised, ""), False).to_numpy(zero_copy_only=False)
    if not empty.any():
        return missing
    return missing | empty[indices]


def people_of(ids: np.ndarray, case_fold: bool = True) -> np.ndarray:
    """The person of every row of an in-memory id array (an estimator's ``groups``): text ids normalised
    by the rule, one Python call per distinct non-ASCII value; any other array (integers) as it is. A
    missing id (null, or text the rule leaves empty) comes back as None, which the bounding refuses: it
    names nobody, and must not join whichever person the rule lists first."""
    if ids.dtype.kind not in "UO" or ids.size == 0:
        return ids
    try:
        values = pa.array(ids.tolist() if ids.dtype.kind == "O" else ids)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # objects of mixed kinds: each is its own spelling
        return ids
    if not is_text(values.type):
        return ids
    _, normalised, indices = normalised_uniques(values, case_fold)
    people = np.asarray(normalised.to_pylist(), dtype=object)[indices]
    people[missing_ids(values)] = None
    return people
