"""The ``kvmon proxy`` in front of a server: its ``/kvmon/stats`` document read each poll (live speeds where the server
has no counters of its own, each reply's timings, what made a conversation's prompt change), used only when the
proxy forwards to that very server. A default proxy that is not there is looked for again every ``ABSENT_RETRY_S``.

A proxy that is not there is no failure unless the user named it (then the reason is shown); one that is there
but does not answer in time is said to be so; one that forwards elsewhere is not this server's.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from kvmon.core.readings import FailureKind, RequestStats, SlotReading, SourceError
from kvmon.proxy.stats import STATS_PATH, ProxyView, parse_stats
from kvmon.sources import procs
from kvmon.sources.http import HttpClient, normalize_base_url, redact_url

PROXY_TIMEOUT_S = 0.5
ABSENT_RETRY_S = 30.0  # a default proxy that is not there is looked for again this often, not every poll


def same_endpoint(a: str, b: str, default_port: int) -> bool:
    """Whether two URLs name the same server (``localhost`` and ``127.0.0.1`` count as the same)."""
    try:
        pa, pb = urlsplit(a), urlsplit(b)
        ha, hb = (pa.hostname or ""), (pb.hostname or "")
        ports = (pa.port or default_port, pb.port or default_port)
    except ValueError:
        return False
    same_host = ha == hb or (procs.is_local_host(ha) and procs.is_local_host(hb))
    return same_host and ports[0] == ports[1]


class ProxyReader:
    """Reads the proxy at ``proxy_url`` (the default one unless ``explicit``) for the server at ``server_url``."""

    def __init__(self, proxy_url: str | None, default_proxy_url: str, server_url: str, default_port: int) -> None:
        self.explicit = proxy_url is not None
        self.url = normalize_base_url(proxy_url) if proxy_url else default_proxy_url
        self._server_url = server_url
        self._default_port = default_port
        self._client: HttpClient | None = None
        self._absent_at: float | None = None  # when the default proxy was last found absent

    def read(self, t_mono: float, t_wall: float) -> tuple[ProxyView | None, str | None]:
        """(the proxy's view, None) or (None, why not when that is worth saying)."""
        if self._absent_at is not None and 0.0 <= t_mono - self._absent_at < ABSENT_RETRY_S:
            return None, None
        if self._client is None:
            self._client = HttpClient(self.url, timeout_s=PROXY_TIMEOUT_S)
        try:
            view = parse_stats(self._client.get_json(STATS_PATH), t_mono, t_wall)
        except SourceError as e:
            if self.explicit or e.failure.kind is FailureKind.TIMEOUT:
                return None, f"kvmon proxy at {redact_url(self.url)}: {e.failure.reason}"
            if e.failure.kind is FailureKind.UNREACHABLE:
                self._absent_at = t_mono
            return None, None
        if view.upstream and not same_endpoint(view.upstream, self._server_url, self._default_port):
            return None, f"the kvmon proxy at {redact_url(self.url)} forwards to {view.upstream}, not here"
        return view, None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def proxy_slots(proxy: ProxyView, n_ctx: int | None, mine: Callable[[str | None], bool],
                last: RequestStats | None) -> tuple[tuple[SlotReading, ...], str | None]:
    """The proxy's streams to this model as slots, each at the conversation's depth as far as the proxy can tell,
    and how that depth is known (None when no stream is open).

    A server that answers through the proxy only says a request's prompt and reply tokens when the reply ends; while
    one streams, its depth is the last reply's input + output tokens plus what it has generated so far (its new
    message is counted when it ends): a lower bound, marked estimated. Before any reply ended, only the tokens so far.
    """
    base = last.context_tokens if last is not None and last.context_tokens is not None else None
    slots = tuple(SlotReading(id=s.id, n_ctx=n_ctx, context_tokens=(base or 0) + s.tokens_so_far, processing=True,
                              n_decoded=s.tokens_so_far, context_estimated=True)
                  for s in proxy.in_flight if mine(s.model))
    if not slots:
        return (), None
    if base is None:
        return slots, ("estimated: the tokens generated so far; the prompt's tokens are counted when the first reply "
                       "ends (the proxy reads them from the server's final stats)")
    return slots, (f"estimated: the last reply's input + output tokens ({base:,}, the proxy's stats) plus the tokens "
                   "generated so far; the new message's tokens are counted when this reply ends")
