"""Pure physics of decode: cache types, model shapes, KV bytes, the bandwidth ceiling, forecasts.

Nothing in this package does I/O or imports Qt, httpx or pynvml.
"""
