"""``kvmon proxy``: a pass-through HTTP proxy in front of Ollama or llama-server that measures generation.

Ollama publishes no running counters, so the live rate can only be seen in the responses. The proxy forwards
every request unchanged and relays the response bytes exactly as they arrive, while it reads a copy of the body:
Ollama's NDJSON (final ``eval_count``/``eval_duration``/``prompt_eval_*``, nanoseconds), llama-server's SSE
``timings`` and OpenAI ``usage``, counting streamed chunks (about one token each) for the in-flight rate.

One job per module: ``framing`` (HTTP/1 heads and chunked bodies), ``meter`` (what one request's body shows),
``prompts`` (why a prompt cache misses), ``stats`` (the ``/kvmon/stats`` document: schema, writer and the reader the
Ollama source uses), ``upstream`` (where to forward, and which server it is), ``listener`` (the accept loop) and
``server`` (the proxy itself); ``kvmon.cli.proxy`` is the command. Nothing is imported here, so that reading the
stats document does not load the server.
"""

# The longest the upstream may take to begin its answer once it has the whole request (a model load and a long
# prompt's prefill come before the first byte), and the longest an answer under way may go quiet: --upstream-timeout.
UPSTREAM_TIMEOUT_S = 300.0
