"""The package version (a bottom module, so any layer can record it without importing the facade)."""

__version__ = "0.1.0"
