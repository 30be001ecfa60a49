"""How records are read (loader/fetch_mode.py): the mode a dataset and the arguments call for, and the
arguments that need an Arrow source."""

from __future__ import annotations

import pytest

import resumable_data as rd
from resumable_data.errors import ConfigError
from resumable_data.loader.fetch_mode import BatchedDataset, FetchMode, MapDataset, resolve_fetch_mode


class Items:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return i


class Batched(Items):
    def __getitems__(self, ids):
        return list(ids)


def mode(dataset, **kw):
    args = dict(mixture=False, packing=None, transform=None, collate_fn=None, arrow_collate=None,
                token_column=None, positional=None)
    return resolve_fetch_mode(dataset, **{**args, **kw})


def test_the_protocols():
    assert isinstance(Items(), MapDataset) and not isinstance(Items(), BatchedDataset)
    assert isinstance(Batched(), BatchedDataset)
    assert not isinstance(iter(range(3)), MapDataset)


def test_the_mode_of_each_kind_of_dataset(shards):
    assert mode(Items())[0] is FetchMode.GETITEM
    assert mode(Batched())[0] is FetchMode.GETITEMS
    assert mode(shards) == (FetchMode.ARROW, None, None)
    assert mode(shards, token_column="tokens") == (FetchMode.ARROW, None, "tokens")


def test_packing_reads_the_token_lengths_and_drops_the_token_column(shards):
    got, lengths, column = mode(shards, packing=rd.Packing(8), token_column="tokens")
    assert got is FetchMode.PACKED and column is None
    assert lengths.tolist() == shards.column_lengths("tokens").tolist()


@pytest.mark.parametrize("kw, param", [
    (dict(arrow_collate=lambda t: t), "arrow_collate"),
    (dict(token_column="tokens"), "token_column"),
])
def test_arrow_only_arguments_on_another_dataset_are_refused(kw, param):
    with pytest.raises(ConfigError, match=f"^{param}=.*expected an rd.ArrowShards dataset"):
        mode(Items(), **kw)


def test_a_token_column_must_be_a_column(shards):
    with pytest.raises(ConfigError, match="^token_column='nope': expected one of the columns"):
        mode(shards, token_column="nope")


def test_packing_refuses_a_transform(shards):
    with pytest.raises(ConfigError, match="^transform=.*None when packing"):
        mode(shards, packing=rd.Packing(8), transform=lambda s: s)
