"""The version of hpcdist (a leaf: every wing may read it without importing the others)."""

__version__ = "0.1.0"
