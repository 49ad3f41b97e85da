"""ocihook: an OCI prestart hook that injects accelerator drivers into containers."""

__version__ = "0.1.0"
