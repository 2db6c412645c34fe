"""The manifest of one shuffle generation, and the content identities that make its parts verifiable.

A shuffle generation (``dpstream.pipelines.shuffle.generations``) is a folder of ``part-NNNNN.parquet`` files that is
never modified once committed. Its manifest records, for every part, the row count, the rows of each
row group (the executors' blocks), the size in bytes and a **content identity**: ``footer-sha256:`` the
SHA-256 of the Parquet footer bytes. The footer holds every column chunk's offsets, sizes and min/max
statistics, so another part, a part of another shuffle or a truncated file has another identity; the
bytes of the data pages are covered by the page CRC32 checksums the shuffle writes and every read
verifies (``page_checksum_verification``). Checking a part costs reading its footer, which decoding
needs anyway: a run checks every part before it reserves budget (``verify_parts``) and again as each
worker first opens a part (``read_verified_footer``).

Any value read from a manifest that becomes a path is checked first: part names must be
``part-NNNNN.parquet`` and the generation folder ``_g-<stamp>-<hex>``.
"""

from __future__ import annotations

import base64
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.lake.blocks import PartCheck, footer_bytes, footer_identity, read_verified_footer
from dpstream.pipelines.lake.files import shown_part
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.unit import ShuffleUnit
from dpstream.pipelines.shuffle.unit import count as _count
from dpstream.pipelines.sources.protocol import SourceVersion
from dpstream.storage import open_url

__all__ = [
    "MANIFEST_FORMAT",
    "Part",
    "PartCheck",
    "Manifest",
    "ShuffleUnit",
    "USER_CODE_COLUMN",
    "USER_MANIFEST_FORMAT",
    "footer_bytes",
    "footer_identity",
    "read_verified_footer",
    "verify_parts",
    "GENERATION_NAME",
    "PART_NAME",
]

MANIFEST_FORMAT = "dpstream-shuffle/2"
USER_MANIFEST_FORMAT = (
    "dpstream-shuffle/3"  # a user-level shuffle: an older reader must not take its rows as rows
)
USER_CODE_COLUMN = "__dpstream_user"  # a user-level part's dense, part-local person codes
PART_NAME = re.compile(r"\Apart-\d{5}\.parquet\Z")
GENERATION_NAME = re.compile(r"\A_g-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}\Z")
_IDENTITY = re.compile(r"\Afooter-sha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Part:
    name: str  # part-NNNNN.parquet, inside the generation folder
    rows: int
    row_groups: tuple[int, ...]  # rows of each row group: the executors' blocks
    size: int
    identity: str  # footer-sha256:<hex> (module docstring)
    users: tuple[int, ...] = ()  # a user-level shuffle: the people of each row group (whole people)

    @property
    def check(self) -> PartCheck:
        return PartCheck(self.size, self.identity)


def _record(document: Any) -> dict[str, Any] | None:
    if document is not None and not isinstance(document, dict):
        raise ValueError(f"preprocessing {document!r} is not a preprocessing record")
    return document


@dataclass(frozen=True)
class Manifest:
    url: str  # the shuffled lake's root, where the manifest was read
    number: int  # commit number: the highest committed one is the current generation
    generation: str  # the folder of this generation's parts
    parts: tuple[Part, ...]  # in training order
    schema_ipc: str  # base64 Arrow IPC schema
    features: tuple[str, ...] | str
    label: str
    num_features: int
    source_url: str
    source_fingerprint: str
    source_rows: int  # rows of the validated source: the parts hold exactly these
    created_at: str
    source_files: tuple[str, ...] = ()  # content identities of the source files (the ledger's units)
    shuffle_id: str = ""  # random per shuffle
    unit: ShuffleUnit | None = None  # a user-level shuffle (None: rows)
    source_version: SourceVersion = SourceVersion()  # the table version shuffled (a folder has none)
    # The public preprocessing the shuffle applied to each source row (``ConvertSpec.record()``, on_read);
    # None: the parts hold the source's columns as stored.
    preprocessing: dict[str, Any] | None = None

    @property
    def is_user_level(self) -> bool:
        return self.unit is not None

    @property
    def num_users(self) -> int:
        """The people of a user-level shuffle's parts (each in exactly one part and one row group)."""
        return sum(sum(part.users) for part in self.parts)

    @property
    def num_units(self) -> int:
        """What a run plan counts: people under the user unit, else rows."""
        return self.num_users if self.is_user_level else self.num_rows

    def block_user_offsets(self) -> list[int]:
        """Per block, in training order, what turns its part-local person codes into codes that ascend
        through the whole shuffle: the people of the parts before it."""
        offsets, before = [], 0
        for part in self.parts:
            offsets += [before] * len(part.row_groups)
            before += sum(part.users)
        return offsets

    @property
    def files(self) -> tuple[tuple[str, int], ...]:
        """(file name, rows) of each part, in training order."""
        return tuple((part.name, part.rows) for part in self.parts)

    @property
    def row_groups(self) -> tuple[tuple[int, ...], ...]:
        return tuple(part.row_groups for part in self.parts)

    @property
    def num_rows(self) -> int:
        return sum(part.rows for part in self.parts)

    @property
    def fingerprint(self) -> str:
        """The shuffled lake's identity for the ledger: the source fingerprint (same rows, same privacy unit)."""
        return self.source_fingerprint

    @property
    def row_order(self) -> str:
        """The data a run on this manifest reads: the source fingerprint, the table version it pinned
        (``@delta-7``; none for a Parquet folder) and the generation. A checkpoint
        and the ledger entry record it, so a run never resumes on another shuffle of the same lake: its
        remaining steps would read rows its earlier steps already used (two releases of a record that
        the single-pass accounting charged once)."""
        return f"{self.source_fingerprint}{self.source_version.tag}/{self.generation}"

    def spec(self, storage_options: dict[str, Any] | None = None) -> LakeSpec:
        """How to read the parts: the features, the label, and a user-level shuffle's person codes."""
        users = USER_CODE_COLUMN if self.is_user_level else None
        return LakeSpec(self.url, self.features, self.label, storage_options or {}, user_column=users)

    def paths(self, storage_options: dict[str, Any] | None = None) -> list[str]:
        _, root = open_url(self.url, storage_options)
        return [f"{root}/{self.generation}/{part.name}" for part in self.parts]

    def part_checks(self, storage_options: dict[str, Any] | None = None) -> dict[str, PartCheck]:
        """{path: what a reader checks it against}."""
        return {path: part.check for path, part in zip(self.paths(storage_options), self.parts, strict=True)}

    def blocks(self, storage_options: dict[str, Any] | None = None) -> list[tuple[int, str, int, int]]:
        """(file index, path, row group, rows) of every block, in training order."""
        return [
            (index, path, group, rows)
            for index, (path, part) in enumerate(zip(self.paths(storage_options), self.parts, strict=True))
            for group, rows in enumerate(part.row_groups)
        ]

    def split_last_file(self) -> tuple[Manifest, Manifest]:
        """(all files but the last, the last file): a held-out split that needs no second shuffle."""
        if len(self.parts) < 2:
            raise LakeError("the shuffled lake needs at least 2 files to hold one out; lower rows_per_file")
        return replace(self, parts=self.parts[:-1]), replace(self, parts=self.parts[-1:])

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_ipc)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": USER_MANIFEST_FORMAT if self.is_user_level else MANIFEST_FORMAT,
            "number": self.number,
            "generation": self.generation,
            "parts": [
                {
                    "name": p.name,
                    "rows": p.rows,
                    "row_groups": list(p.row_groups),
                    "size": p.size,
                    "identity": p.identity,
                    **({"users": list(p.users)} if self.is_user_level else {}),
                }
                for p in self.parts
            ],
            "schema_ipc": self.schema_ipc,
            "features": self.features if isinstance(self.features, str) else list(self.features),
            "label": self.label,
            "num_features": self.num_features,
            "source_url": self.source_url,
            "source_fingerprint": self.source_fingerprint,
            "source_rows": self.source_rows,
            "created_at": self.created_at,
            "source_files": list(self.source_files),
            "shuffle_id": self.shuffle_id,
            **({"unit": self.unit.to_json()} if self.unit is not None else {}),
            **(
                {"source_version": self.source_version.to_json()}
                if self.source_version.version is not None
                else {}
            ),
            **({"preprocessing": self.preprocessing} if self.preprocessing is not None else {}),
        }

    @classmethod
    def from_json(cls, document: Any, url: str, where: str) -> Manifest:
        """A manifest read at ``where`` (the commit record) of the shuffled lake at ``url``; ``LakeError``
        naming ``where`` when it is not a well-formed one (unknown format, a part name that is not
        ``part-NNNNN.parquet``, a part listed twice, row counts that disagree)."""

        def bad(reason: str) -> LakeError:
            return LakeError(
                f"{where} is not a valid dpstream shuffle manifest ({reason}): it was edited or damaged. Nothing was "
                "trained on it; shuffle again with `dpstream shuffle CONFIG --reshuffle`"
            )

        formats = (MANIFEST_FORMAT, USER_MANIFEST_FORMAT)
        if not isinstance(document, dict) or document.get("format") not in formats:
            found = document.get("format") if isinstance(document, dict) else type(document).__name__
            raise bad(f"format {found!r}, expected {MANIFEST_FORMAT!r} or {USER_MANIFEST_FORMAT!r}")
        user_level = document["format"] == USER_MANIFEST_FORMAT
        try:
            parts = tuple(
                Part(
                    name=str(p["name"]),
                    rows=_count(p["rows"]),
                    row_groups=tuple(_count(g) for g in p["row_groups"]),
                    size=_count(p["size"]),
                    identity=str(p["identity"]),
                    users=tuple(_count(u) for u in p["users"]) if user_level else (),
                )
                for p in document["parts"]
            )
            features = document["features"]
            manifest = cls(
                url=url,
                number=_count(document["number"]),
                generation=str(document["generation"]),
                parts=parts,
                schema_ipc=str(document["schema_ipc"]),
                features=features if isinstance(features, str) else tuple(str(f) for f in features),
                label=str(document["label"]),
                num_features=_count(document["num_features"]),
                source_url=str(document["source_url"]),
                source_fingerprint=str(document["source_fingerprint"]),
                source_rows=_count(document["source_rows"]),
                created_at=str(document["created_at"]),
                source_files=tuple(str(f) for f in document.get("source_files", ())),
                shuffle_id=str(document.get("shuffle_id", "")),
                unit=ShuffleUnit.from_json(document["unit"]) if user_level else None,
                source_version=SourceVersion.from_json(document.get("source_version")),
                preprocessing=_record(document.get("preprocessing")),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise bad(f"{type(error).__name__}: {error}") from None
        reason = manifest._inconsistency()
        if reason is not None:
            raise bad(reason)
        return manifest

    def _inconsistency(self) -> str | None:
        """Why the manifest's records disagree with one another (a generation or part name of another form,
        a part without a content identity or listed twice, row groups, people or row counts that do not add
        up), or None."""
        if not GENERATION_NAME.match(self.generation):
            return f"generation {self.generation!r} is not a generation folder name"
        for part in self.parts:
            if not PART_NAME.match(part.name):
                return f"part name {part.name!r} is not part-NNNNN.parquet"
            if not _IDENTITY.match(part.identity):
                return f"{part.name} has no content identity"
            if sum(part.row_groups) != part.rows or part.rows == 0:
                return f"{part.name}'s row groups hold {sum(part.row_groups)} rows, not {part.rows}"
        names = [part.name for part in self.parts]
        repeated = sorted({name for name in names if names.count(name) > 1})
        identities = [part.identity for part in self.parts]
        if repeated or len(set(identities)) != len(identities):
            return f"a part is listed twice ({', '.join(repeated) or 'the same content under two names'})"
        user_level = self.is_user_level
        if user_level and len(self.parts) > self.unit.outputs:
            return f"{len(self.parts)} parts for a layout of {self.unit.outputs} outputs"
        for part in self.parts if user_level else ():
            if (
                len(part.users) != len(part.row_groups)
                or min(part.users, default=0) < 1
                or any(users > rows for users, rows in zip(part.users, part.row_groups, strict=True))
            ):
                return f"{part.name} lists people {list(part.users)} for row groups {list(part.row_groups)}"
        # Contribution bounding keeps at most every row of the source; a row shuffle keeps each exactly once.
        if (self.num_rows > self.source_rows) if user_level else (self.num_rows != self.source_rows):
            return f"its parts hold {self.num_rows:,} rows but the source held {self.source_rows:,}"
        return None


def verify_parts(manifest: Manifest, storage_options: dict[str, Any] | None = None) -> None:
    """Check every part of ``manifest`` against its size, content identity and row groups before a run
    charges anything; ``LakeError`` names the first bad part in training order (missing, changed, foreign,
    truncated). The footers are read by ``VERIFY_THREADS`` threads: on object storage each is two small
    ranged GETs, and a lake of many parts should not wait for them one by one."""
    arguments = list(zip(manifest.paths(storage_options), manifest.parts, strict=True))
    with ThreadPoolExecutor(VERIFY_THREADS) as pool:
        futures = [
            pool.submit(_verify_part, manifest.url, storage_options, path, part) for path, part in arguments
        ]
        for future in futures:  # in part order: the first bad part is the one named
            future.result()


VERIFY_THREADS = 8


def _verify_part(url: str, storage_options: dict[str, Any] | None, path: str, part: Part) -> None:
    fs, _ = open_url(url, storage_options)
    metadata = read_verified_footer(fs, path, part.check)
    groups = tuple(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    if groups != part.row_groups:
        raise LakeError(
            f"{shown_part(path)} holds row groups of {list(groups)} rows, but its manifest lists {list(part.row_groups)}: "
            "the manifest or the part was changed after the shuffle. Shuffle again with `dpstream shuffle CONFIG --reshuffle`"
        )
