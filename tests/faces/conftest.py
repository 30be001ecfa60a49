"""Shared fixtures for the faces tests."""

from tests.loader.conftest import arrow_dir, shards  # noqa: F401  (fixtures)
