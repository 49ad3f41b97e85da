"""Shim for `pip install -e .` with setuptools < 64 (RHEL 9 has 53).

The metadata is in setup.cfg."""

from setuptools import setup

setup()
