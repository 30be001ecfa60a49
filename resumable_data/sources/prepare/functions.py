"""The per-record function of ``rd.prepare`` and its fingerprint.

Algorithm: a :class:`Tokenize` holds a Hugging Face ``tokenizers.Tokenizer`` as its JSON text
(``Tokenizer.to_str()``: vocabulary, merges, normalizer, pre-tokenizer, post-processor, added
tokens, truncation and padding settings) plus the settings of the call (text column,
``add_special_tokens``); its fingerprint is the xxh3-128 of that text and those settings. A
``transformers`` fast tokenizer is read through its ``backend_tokenizer`` (the same object), a
path through ``Tokenizer.from_file`` (a ``tokenizer.json`` or a folder holding one). Each worker
process rebuilds the tokenizer once from the text (cached by fingerprint) and calls
``encode_batch_fast`` on chunks of documents, single-threaded inside the worker
(``TOKENIZERS_PARALLELISM=false``: the process pool is the parallelism).

A :class:`MapRecords` wraps any picklable ``fn(record: dict) -> dict | None`` (``None`` drops the
record); its fingerprint is the function's qualified name and the ``version`` string the user
declares (required: rd cannot hash a function's behaviour).

Guarantee: the same tokenizer bytes and settings give the same fingerprint and the same output;
the output is independent of the chunking (documents are encoded independently).

Cost: construction serializes the tokenizer once (a few MB for a 50k vocabulary).
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from resumable_data.errors import ConfigError, ConfigTypeError, describe

__all__ = ["TOKENS", "MapRecords", "RecordFunction", "Tokenize", "record_function"]

#: The output column :class:`Tokenize` writes: ``list<int32>`` token ids, one row per document.
TOKENS = "tokens"

_TOKENIZERS: dict[str, Any] = {}  # fingerprint -> Tokenizer, one per worker process


def _load_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizers.Tokenizer`` from an object or a local path; ConfigError otherwise."""
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers comes with datasets/transformers
        raise ConfigError(
            describe(
                "tokenizer", type(tokenizer).__name__, "the `tokenizers` package installed", "pip install tokenizers"
            )
        ) from None
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        path = Path(tokenizer)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            hub = ""
            if not path.exists() and not path.suffix and len(path.parts) <= 2:  # "gpt2", "org/model"
                hub = (
                    f"; a Hugging Face Hub name is not downloaded here: pass "
                    f"transformers.AutoTokenizer.from_pretrained({str(tokenizer)!r}) (a fast tokenizer) instead"
                )
            raise ConfigError(
                describe(
                    "tokenizer",
                    str(tokenizer),
                    "a tokenizer.json file or a folder holding one",
                    "pass the path of a saved tokenizer (Tokenizer.save(path), or "
                    "transformers' tokenizer.save_pretrained(folder)), or the tokenizer object" + hub,
                )
            )
        try:
            return Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exception
            raise ConfigError(
                describe(
                    "tokenizer",
                    str(path),
                    "a tokenizer.json written by Hugging Face tokenizers",
                    f"re-save it with tokenizer.save(path) ({exc})",
                )
            ) from None
    transformers = sys.modules.get("transformers")  # never imported here: the user's object brings it
    if transformers is not None and isinstance(tokenizer, transformers.PreTrainedTokenizerFast):
        return tokenizer.backend_tokenizer
    if transformers is not None and isinstance(tokenizer, transformers.PreTrainedTokenizerBase):
        raise ConfigError(
            describe(
                "tokenizer",
                type(tokenizer).__name__,
                "a fast (Rust) tokenizer",
                "load it with AutoTokenizer.from_pretrained(path, use_fast=True), or pass map_fn=... with version=...",
            )
        )
    raise ConfigTypeError(
        describe(
            "tokenizer",
            type(tokenizer).__name__,
            "a tokenizers.Tokenizer, a transformers fast tokenizer, or a local path",
            "pass Tokenizer.from_file('tokenizer.json') or the path itself",
        )
    )


def _text_column(table: pa.Table, column: str) -> list[str]:
    col = table.column(column)
    if pa.types.is_null(col.type):  # JSONL records whose text is null, all of them in this chunk
        return [""] * len(col)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise ConfigError(
            describe(
                "text_column",
                column,
                f"a string column (it is {col.type})",
                "pass text_column= naming the text column, or map_fn= to build the text",
            )
        )
    return [t if t is not None else "" for t in col.to_pylist()]


@dataclass(frozen=True)
class Tokenize:
    """Tokenize ``text_column`` into ``tokens: list<int32>``; copy ``keep_columns`` through."""

    tokenizer_json: str
    text_column: str
    add_special_tokens: bool
    keep_columns: tuple[str, ...]

    @property
    def input_columns(self) -> tuple[str, ...]:
        return (self.text_column, *self.keep_columns)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "tokenizer",
            "tokenizer_xxh3_128": xxhash.xxh3_128_hexdigest(self.tokenizer_json.encode("utf-8")),
            "text_column": self.text_column,
            "add_special_tokens": self.add_special_tokens,
            "keep_columns": list(self.keep_columns),
        }

    def _tokenizer(self) -> Any:
        key = xxhash.xxh3_128_hexdigest(self.tokenizer_json.encode("utf-8"))
        tok = _TOKENIZERS.get(key)
        if tok is None:
            from tokenizers import Tokenizer

            tok = _TOKENIZERS[key] = Tokenizer.from_str(self.tokenizer_json)
        return tok

    def apply(self, table: pa.Table) -> pa.Table:
        texts = _text_column(table, self.text_column)
        encodings = self._tokenizer().encode_batch_fast(texts, add_special_tokens=self.add_special_tokens)
        ids = [e.ids for e in encodings]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int32, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(offsets[-1]))
        tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
        cols = {TOKENS: tokens, **{c: table.column(c) for c in self.keep_columns}}
        return pa.table(cols)


@dataclass(frozen=True)
class MapRecords:
    """Apply ``fn(record) -> dict | None`` to every record (``None`` drops it)."""

    fn: Callable[[dict[str, Any]], dict[str, Any] | None]
    version: str
    schema: pa.Schema | None

    @property
    def input_columns(self) -> tuple[str, ...] | None:
        return None  # the function sees whole records

    def fingerprint(self) -> dict[str, Any]:
        name = f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', type(self.fn).__name__)}"
        return {
            "kind": "function",
            "name": name,
            "version": self.version,
            "schema": None if self.schema is None else self.schema.to_string(show_schema_metadata=False),
        }

    def apply(self, table: pa.Table) -> pa.Table:
        rows = [r for r in map(self.fn, table.to_pylist()) if r is not None]
        # Arrow builds the columns of the first dict (or of the schema) and fills any other value it is
        # given with null: every row is checked, so that no returned value is lost without a word
        keys = None if self.schema is None else set(self.schema.names)
        for r in rows:
            if not isinstance(r, dict):
                raise ConfigTypeError(
                    describe(
                        "map_fn",
                        type(r).__name__,
                        "a function returning a dict (or None) for every record",
                        "return {'column': value, ...} per record",
                    )
                )
            if keys is None:
                keys = set(r)
            elif not (r.keys() <= keys if self.schema is not None else r.keys() == keys):
                raise ConfigError(
                    describe(
                        "map_fn",
                        sorted(r),
                        f"the same keys in every returned dict ({sorted(keys)})",
                        "return every column in every dict (None for a missing value), or pass schema= "
                        "naming every column",
                    )
                )
        try:
            return pa.Table.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ConfigError(
                describe(
                    "schema",
                    self.schema,
                    "an Arrow schema matching map_fn's output",
                    f"pass schema=pa.schema([...]) for map_fn's columns ({exc})",
                )
            ) from None


RecordFunction = Tokenize | MapRecords


def record_function(
    tokenizer: Any,
    map_fn: Any,
    *,
    version: str | None,
    text_column: str,
    add_special_tokens: bool,
    keep_columns: tuple[str, ...],
    schema: pa.Schema | None,
    picklable: bool,
) -> RecordFunction:
    """Validate the choice of function and build it (errors before any work starts)."""
    if (tokenizer is None) == (map_fn is None):
        raise ConfigError(
            describe(
                "tokenizer/map_fn",
                (tokenizer is not None, map_fn is not None),
                "exactly one of tokenizer= and map_fn=",
                "pass tokenizer=Tokenizer or path, or map_fn=fn with version='v1'",
            )
        )
    if tokenizer is not None:
        if version is not None:
            raise ConfigError(
                describe("version", version, "None with tokenizer= (the tokenizer is hashed)", "drop version=")
            )
        if schema is not None:
            raise ConfigError(describe("schema", schema, "None with tokenizer= (tokens: list<int32>)", "drop schema="))
        return Tokenize(_load_tokenizer(tokenizer).to_str(), text_column, bool(add_special_tokens), keep_columns)
    if not callable(map_fn):
        raise ConfigTypeError(
            describe("map_fn", type(map_fn).__name__, "a callable fn(record) -> dict | None", "pass a function")
        )
    if not isinstance(version, str) or not version:
        raise ConfigError(
            describe(
                "version",
                version,
                "a non-empty string naming this map_fn's behaviour (recorded in the lineage; rd cannot hash code)",
                "pass version='v1' and change it whenever map_fn's output changes",
            )
        )
    if schema is not None and not isinstance(schema, pa.Schema):
        raise ConfigTypeError(
            describe(
                "schema",
                type(schema).__name__,
                "a pyarrow.Schema or None",
                "pass pa.schema([('tokens', pa.list_(pa.int32()))])",
            )
        )
    if picklable:
        try:
            pickle.dumps(map_fn)
        except Exception as exc:
            raise ConfigError(
                describe(
                    "map_fn",
                    repr(map_fn)[:80],
                    "a picklable function (defined at module level)",
                    f"move it to module level, or use engine='ray' (cloudpickle) ({exc})",
                )
            ) from None
    return MapRecords(map_fn, version, schema)
