"""kvmon: why your local LLM is getting slower, live."""

__version__ = "0.2.0"
