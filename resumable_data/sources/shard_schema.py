"""Shard schemas: the canonical text two shards are compared by, and the checks opening runs on them.

Algorithm: :func:`canonical_schema` is the schema's text form without schema or field metadata
(``Schema.to_string(show_field_metadata=False, show_schema_metadata=False)``);
:func:`check_schema_names` walks every field, nested ones included (list values, map keys and
items, struct/union children, dictionary values), and encodes its name as UTF-8;
:func:`check_same_schema` compares two canonical texts.

Guarantee: the canonical text names every field, type and nullability, is stable across pyarrow
versions for the types Arrow has had since 1.0, and ignores writer-specific metadata (e.g. the
``huggingface`` key), which does not change any record. Binary ``Schema.serialize()`` bytes were
rejected as the canonical form because the flatbuffer layout is an implementation detail of the
writer. A schema whose field names are not valid UTF-8 raises (``UnicodeDecodeError``, turned into
a :class:`~resumable_data.DatasetIntegrityError` naming the shard by :mod:`.validate`); two shards
whose canonical schemas differ are a :class:`~resumable_data.ConfigError` showing both.

Cost: one pass over the schema's fields; nothing is read from a file. A restore costs nothing here
(the canonical text is pinned in the manifest).
"""

from __future__ import annotations

import pyarrow as pa

from resumable_data.errors import ConfigError, describe

__all__ = ["canonical_schema", "check_same_schema", "check_schema_names"]


def canonical_schema(schema: pa.Schema) -> str:
    """The schema's canonical text (names, types, nullability; no metadata)."""
    return schema.to_string(show_field_metadata=False, show_schema_metadata=False)


def _check_type_names(t: pa.DataType) -> None:
    if isinstance(t, pa.DictionaryType):
        _check_type_names(t.value_type)
        return
    if isinstance(t, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        _check_field_names(t.value_field)
        return
    if isinstance(t, pa.MapType):
        _check_field_names(t.key_field)
        _check_field_names(t.item_field)
        return
    for i in range(t.num_fields):  # struct, union, list views, run-end encoded
        _check_field_names(t.field(i))


def _check_field_names(f: pa.Field) -> None:
    f.name.encode("utf-8")  # decoding the name raises UnicodeDecodeError on invalid UTF-8
    _check_type_names(f.type)


def check_schema_names(schema: pa.Schema) -> None:
    """Raise (UnicodeDecodeError) unless every field name, nested ones included, is valid UTF-8."""
    for i in range(len(schema)):
        _check_field_names(schema.field(i))


def check_same_schema(first_rel: str, first: str, rel: str, other: str) -> None:
    """The one schema-mismatch error (pinning and opening, on every store): names the shard and
    shows both canonical schemas."""
    if other != first:
        raise ConfigError(
            describe(
                "shard",
                rel,
                f"the schema of the first shard {first_rel!r} ({first!r})",
                f"rewrite {rel!r} with the common schema or pin it separately; it has {other!r}",
            )
        )
