"""resumable_data.sources.version_modes: the modes a version's manifest and arguments name."""

import pytest

import resumable_data as rd
from resumable_data._schema import coerce_enum
from resumable_data.sources import version
from resumable_data.sources.version_modes import HashMode, Selection, VerifyLevel, etag_digest


def test_the_modes_are_the_ones_the_package_and_version_module_name():
    assert rd.VerifyLevel is VerifyLevel is version.VerifyLevel
    assert version.HashMode is HashMode and version.Selection is Selection and version.etag_digest is etag_digest
    assert [m.value for m in HashMode] == ["content", "size", "etag"]  # the manifest's strings
    assert [m.value for m in Selection] == ["directory", "files"]


def test_etag_digest_is_fixed_per_etag_and_differs_between_etags():
    assert etag_digest('"abc"') == etag_digest('"abc"') != etag_digest('"abd"')
    assert len(etag_digest("x")) == 32


def test_an_unknown_level_names_the_parameter():
    with pytest.raises(rd.ConfigError, match="verify"):
        coerce_enum("bytes", VerifyLevel, "verify")
