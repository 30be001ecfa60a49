"""Column plans moved between spans: concatenated over several sources, or kept as rows of absolute
addresses and rebuilt over the units a batch touches.

Algorithm:

- concatenated sources (``ArrowShards.concatenated``, the view ``rd.Mixture`` gathers through):
  one column's plan over every source's units is made from each source's own plan
  (:func:`.gather.plan_column` over its units and maps): every per-unit base is moved from the
  source's span onto one span over all the sources' maps and the bases are concatenated
  (:func:`concat_columns`).
- decoded units (Parquet row groups, record batches read by range from a remote store: each its
  own record batch in the heap, :mod:`.gather_decoded`): each unit's plan is built once when it is
  decoded and kept as a row of absolute addresses (:func:`flatten_plan`); per batch the touched
  units' rows become the same tree over one span covering their buffers (:func:`rebuild_plan`),
  so they are gathered by the same nodes (:mod:`.gather_plan`) and kernels as mapped shards.

Guarantee: both equal :func:`.gather.plan_column` over the same units (the same nodes, bases and
checks); what it refuses they refuse (a shift that is not a whole number of items, dictionaries
that differ between units: None, the per-unit fallback).

Cost: one array operation per node and part (:func:`concat_columns`) or per node and batch
(:func:`rebuild_plan`) instead of Python steps per unit; :func:`flatten_plan`: Python steps per
node of one unit, once per decoded unit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

from resumable_data.sources.gather import ColumnGather
from resumable_data.sources.gather_plan import (
    BoolNode,
    DictionaryNode,
    FixedListNode,
    FixedNode,
    Node,
    NoPlan,
    Span,
    StructNode,
    Validity,
    VarNode,
    address_span,
)

__all__ = [
    "concat_columns",
    "flatten_plan",
    "rebuild_plan",
]


def concat_columns(
    parts: Sequence[ColumnGather | None], counts: Sequence[int], wholes: Sequence[pa.Buffer | None]
) -> ColumnGather | None:
    """One column's plan over several sources' units in order, from each source's own plan
    (``parts``, built over its ``counts`` units and its maps): every per-unit base is moved from the part's
    span onto one span over ``wholes`` (all the sources' maps, in order) and the bases are
    concatenated. Equals :func:`.gather.plan_column` over the concatenated units (the same nodes, bases
    and checks: a unit's buffers were checked inside its map when its part was planned; a shift
    that is not a whole number of items, or dictionaries that differ, fail here as they fail
    there), at a cost of one array operation per node and part instead of Python steps per unit."""
    roots = [p.root for p in parts if p is not None]
    if not parts or len(roots) < len(parts):
        return None
    span = Span(address_span([w for w in wholes if w is not None]), wholes)
    try:
        return ColumnGather(_concat(roots, counts, span))
    except NoPlan:
        return None


def _shifted(bases: list[np.ndarray], spans: list[Span], span: Span, scale: int, width: int) -> np.ndarray:
    """``bases`` (items of ``width`` bytes, times ``scale`` for bit indices) moved onto ``span``;
    negative entries (no bitmap) stay -1."""
    out = []
    for b, s in zip(bases, spans):
        delta = s.buffer.address - span.buffer.address
        if delta < 0 or delta % width:
            raise NoPlan
        out.append(np.where(b >= 0, b + delta // width * scale, b) if scale == 8 else b + delta // width)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _concat_valid(nodes: Sequence[Node], counts: Sequence[int], span: Span) -> Validity | None:
    valids = [n.valid for n in nodes]
    if all(v is None for v in valids):
        return None
    bases = [np.full(c, -1, dtype=np.int64) if v is None else v.base for c, v in zip(counts, valids)]
    spans = [span if v is None else v.span for v in valids]
    return Validity(span, _shifted(bases, spans, span, 8, 1))


_N = TypeVar("_N", bound=Node)


def _same(nodes: Sequence[Node], cls: type[_N]) -> list[_N]:
    """``nodes``, each exactly a ``cls`` (the same type level in every part), else NoPlan."""
    out = [n for n in nodes if isinstance(n, cls)]  # no node class derives from another
    if len(out) < len(nodes):
        raise NoPlan
    return out


def _concat(nodes: Sequence[Node], counts: Sequence[int], span: Span) -> Node:
    """The node of ``nodes`` (the same type level of each part's plan) over ``span``."""
    first = nodes[0]
    node: Node
    if isinstance(first, FixedNode):
        fx = _same(nodes, FixedNode)
        node = FixedNode(
            first.dtype, first.width, span, _shifted([n.base for n in fx], [n.span for n in fx], span, 1, first.width)
        )
    elif isinstance(first, BoolNode):
        bo = _same(nodes, BoolNode)
        node = BoolNode(span, _shifted([n.base for n in bo], [n.span for n in bo], span, 8, 1))
    elif isinstance(first, VarNode):
        va = _same(nodes, VarNode)
        ow = 8 if first.offset_np is np.int64 else 4
        base = _shifted([n.base for n in va], [n.span for n in va], span, 1, ow)
        node = VarNode(first.dtype, span, ow, base, _concat([n.child for n in va], counts, span), first.is_bytes)
    elif isinstance(first, FixedListNode):
        node = FixedListNode(first.dtype, _concat([n.child for n in _same(nodes, FixedListNode)], counts, span))
    elif isinstance(first, StructNode):
        st = _same(nodes, StructNode)
        node = StructNode(
            first.dtype, [_concat([n.children[i] for n in st], counts, span) for i in range(len(first.children))]
        )
    elif isinstance(first, DictionaryNode):
        di = _same(nodes, DictionaryNode)
        if any(not n.dictionary.equals(first.dictionary) for n in di[1:]):
            raise NoPlan
        indices = _concat([n.indices for n in di], counts, span)
        assert isinstance(indices, FixedNode)
        return DictionaryNode(first.dtype, indices, first.dictionary)
    else:
        raise NoPlan
    node.valid = _concat_valid(nodes, counts, span)
    return node


# -- plans as rows of addresses (decoded units: :mod:`.gather_decoded`) ---------------------------
def _item_bytes(node: Node) -> int:
    """Bytes per item of the buffer a node's base indexes (1 for bit-indexed nodes)."""
    if isinstance(node, FixedNode):
        return node.width
    if isinstance(node, VarNode):
        return 8 if node.offset_np is np.int64 else 4
    return 1


def _children(node: Node) -> list[Node]:
    if isinstance(node, (VarNode, FixedListNode)):
        return [node.child]
    if isinstance(node, StructNode):
        return node.children
    return []


def _flatten(node: Node, out: list[int], keys: Callable[[pa.Array], int] | None) -> bool:
    """Append ``node``'s absolute addresses (its bitmap's first bit or -1, then its own first item
    in bytes, or first bit for ``bool``; then its children's) to ``out``; a dictionary appends its
    dictionary's key (``keys``, -1: none), then its indices' addresses. False for a dictionary
    without a key or an item not aligned to its width."""
    if isinstance(node, DictionaryNode):
        key = -1 if keys is None else keys(node.dictionary)
        out.append(key)
        return key >= 0 and _flatten(node.indices, out, keys)
    v = node.valid
    out.append(-1 if v is None or v.base[0] < 0 else v.span.buffer.address * 8 + int(v.base[0]))
    if isinstance(node, BoolNode):
        out.append(node.span.buffer.address * 8 + int(node.base[0]))
    elif isinstance(node, (FixedNode, VarNode)):
        w = _item_bytes(node)
        address = node.span.buffer.address + int(node.base[0]) * w
        if address % w:
            return False
        out.append(address)
    return all(_flatten(c, out, keys) for c in _children(node))


def flatten_plan(plan: ColumnGather, keys: Callable[[pa.Array], int] | None = None) -> np.ndarray | None:
    """A plan over one unit as a row of absolute addresses, one per node and bitmap in depth-first
    order (:func:`rebuild_plan` reads them back), or None where it has none (an item not aligned to
    its width; a dictionary that ``keys`` gives no key, -1, or any dictionary without ``keys``). A
    dictionary's entry is the key ``keys`` gives its dictionary: units whose dictionaries have the
    same key are gathered as one (``keys`` must give one key only to equal dictionaries). The
    addresses are only valid while the unit's buffers live."""
    out: list[int] = []
    return np.array(out, dtype=np.int64) if _flatten(plan.root, out, keys) else None


def _rebuild(
    template: Node, cols: Iterator[np.ndarray], span: Span, lo: int, dictionaries: Callable[[int], pa.Array] | None
) -> Node:
    if isinstance(template, DictionaryNode):  # one dictionary for every unit, or no plan
        keys = next(cols)
        indices = _rebuild(template.indices, cols, span, lo, dictionaries)
        key = int(keys[0])
        if dictionaries is None or key < 0 or not bool((keys == key).all()):
            raise NoPlan
        assert isinstance(indices, FixedNode)
        return DictionaryNode(template.dtype, indices, dictionaries(key))
    valid = next(cols)
    node: Node
    if isinstance(template, BoolNode):
        node = BoolNode(span, next(cols) - lo * 8)
    elif isinstance(template, FixedNode):
        node = FixedNode(template.dtype, template.width, span, (next(cols) - lo) // template.width)
    elif isinstance(template, VarNode):
        ow = _item_bytes(template)
        base = (next(cols) - lo) // ow
        child = _rebuild(template.child, cols, span, lo, dictionaries)
        node = VarNode(template.dtype, span, ow, base, child, template.is_bytes)
    elif isinstance(template, FixedListNode):
        node = FixedListNode(template.dtype, _rebuild(template.child, cols, span, lo, dictionaries))
    elif isinstance(template, StructNode):
        node = StructNode(template.dtype, [_rebuild(c, cols, span, lo, dictionaries) for c in template.children])
    else:  # flatten_plan gives no row to any other node
        raise AssertionError(f"no row for {type(template).__name__}")
    has = valid >= 0
    if has.any():
        node.valid = Validity(span, np.where(has, valid - lo * 8, -1))
    return node


def rebuild_plan(
    template: ColumnGather,
    rows: np.ndarray,
    span: pa.Buffer,
    dictionaries: Callable[[int], pa.Array] | None = None,
) -> ColumnGather | None:
    """The plan of ``template``'s type over the units whose :func:`flatten_plan` rows are the
    columns of ``rows`` (``[nodes, units]``), on ``span``: a buffer covering every unit's buffers,
    its address a multiple of 64 (so every item width divides each base's offset) and whose
    ``base`` keeps the units alive. Equals :func:`.gather.plan_column` over those units (same nodes; each
    base moved onto the span with one array operation). A dictionary level takes its dictionary
    from ``dictionaries`` by the units' key; units whose keys differ have no plan (None: the
    per-unit fallback, as :func:`.gather.plan_column` refuses differing dictionaries)."""
    lo = span.address
    if lo % 64:
        raise ValueError(f"span address {lo:#x}: expected a multiple of 64")
    try:
        return ColumnGather(_rebuild(template.root, iter(rows), Span(span, [None]), lo, dictionaries))
    except NoPlan:
        return None
