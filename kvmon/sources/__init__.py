"""Sources: turn servers, GPUs, processes and log files into immutable readings."""
