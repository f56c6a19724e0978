"""Header: backend and version, model, GPU(s), context used / allocated, decode vs ceiling, efficiency."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.serving import SERVING_LABELS
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.labels import ValueLabel
from kvmon.gui.panels.memory import bandwidth_text


def _params(n: int | None) -> str | None:
    if n is None:
        return None
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


# (row, column, row span, column span) of the names, the live line and the headline, in each arrangement
PLACES: dict[str, tuple[tuple[int, int, int, int], ...]] = {
    # the names and the live line beside the headline, which spans both
    "wide": ((1, 0, 1, 1), (2, 0, 1, 1), (1, 1, 2, 1)),
    # the names across the window; the live line beside the headline below them
    "split": ((1, 0, 1, 2), (2, 0, 1, 1), (2, 1, 1, 1)),
    # a line each
    "stacked": ((1, 0, 1, 2), (2, 0, 1, 2), (3, 0, 1, 2)),
}


class HeaderPanel(QtWidgets.QFrame):
    """The numbers a person glances at, dense: the server, model and devices and the live context and KV beside the
    headline (below it in a narrow window); every number has a tooltip with its source."""

    SPACING = 16  # between the labels of a line, and between the lines and the headline beside them

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("header")
        self.banner = ValueLabel()
        self.banner.setStyleSheet(f"color: {theme.hex_color('warning')}; font-weight: bold;")
        self.banner.hide()
        self.backend = ValueLabel()
        self.model = ValueLabel()
        self.gpus = ValueLabel()
        self.context = ValueLabel()
        self.kv = ValueLabel()
        self.speed = ValueLabel()
        self.speed.setStyleSheet("font-size: 16pt;")
        self.efficiency = ValueLabel()
        self.efficiency.setStyleSheet("font-size: 12pt;")
        for w in (self.backend, self.model, self.gpus, self.context, self.kv, self.banner):
            # each takes the room its text needs while the window has it; a narrower window shortens them with
            # "…" (the whole text on hover) instead of cutting them off
            w.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Preferred)
            w.set_elide(True)
        # the server, model and devices; the context and KV; the headline: one line each, placed by ``_arrange``
        self._lines: list[QtWidgets.QHBoxLayout] = []
        self._line_labels = ((self.backend, self.model, self.gpus), (self.context, self.kv),
                             (self.speed, self.efficiency))
        for labels in self._line_labels:
            line = QtWidgets.QHBoxLayout()
            line.setSpacing(self.SPACING)
            for w in labels:
                line.addWidget(w)
            line.addStretch(1)
            self._lines.append(line)
        self._grid = grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(8, 2, 8, 2)
        grid.setHorizontalSpacing(self.SPACING)
        grid.setVerticalSpacing(0)
        grid.addWidget(self.banner, 0, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        self._layout = ""  # "wide", "split" or "stacked" (see _arrange)
        self._place("wide")
        self._key: tuple[object, ...] | None = None  # the server, model and devices the labels show now
        self._live: tuple[object, ...] | None = None  # ... and the live figures

    @property
    def arrangement(self) -> str:
        """How the lines are placed now: "wide", "split" or "stacked"."""
        return self._layout

    def _place(self, layout: str) -> None:
        """Put the three lines in the cells ``PLACES[layout]`` gives them."""
        for line, cell in zip(self._lines, PLACES[layout], strict=True):
            if self._layout:
                self._grid.removeItem(line)
                line.setParent(None)  # a layout joins another only without a parent
            self._grid.addLayout(line, *cell)
        self._layout = layout

    def _arrange(self) -> None:
        """Place the lines by the width they need whole: the names and the live figures beside the headline while
        all fit (two lines), else the names across the window above the live line and the headline, else a line
        each; only what the narrowest window cannot hold is cut with "…". kvmon beside a chat is often half a screen
        wide. A label's width only grows, or shrinks when its text becomes much shorter (``ValueLabel``), so a
        changing figure does not move the lines back and forth."""
        names, live, head = (sum(w.sizeHint().width() for w in labels) + self.SPACING * (len(labels) - 1)
                             for labels in self._line_labels)
        m = self._grid.contentsMargins()
        room = self.contentsRect().width() - m.left() - m.right() - self.SPACING
        layout = ("wide" if max(names, live) + head <= room else "split" if live + head <= room else "stacked")
        if layout != self._layout:
            self._place(layout)

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._arrange()

    def event(self, e: QtCore.QEvent) -> bool:
        """A label asking for another width asks the layout again: the arrangement is checked then, not each poll."""
        if e.type() == QtCore.QEvent.Type.LayoutRequest:
            self._arrange()
        return super().event(e)

    def set_banner(self, text: str | None) -> None:
        """A line that must be seen (e.g. the demo notice)."""
        self.banner.set(text or "")
        self.banner.setVisible(bool(text))

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the header fields of one snapshot; nothing is formatted when none of them changed (idle polls)."""
        serving = s.serving.kind if s.serving is not None else None
        live = (s.context_tokens, len(s.slots), s.forecast.tokens_until_ctx_full, s.kv_in_use_bytes,
                s.kv_allocated_bytes, s.decode_tok_s, s.ceiling_tok_s, s.efficiency, s.ceiling_suspect,
                s.connection.status, s.speculative, s.activity)
        key = (s.backend, serving, s.server_version, s.url, s.model, s.provenance, s.reasons, s.gpus_unavailable_reason,
               tuple((g.index, g.name, g.peak_bandwidth_bytes_per_s, g.bandwidth_source, g.kind) for g in s.gpus),
               (s.host.in_ceiling, s.host.host_bandwidth_bytes_per_s, s.host.memory_type, s.host.cpu_name))
        if key == self._key:  # the server, model and devices as they were: only the live figures may move
            if live != self._live:
                self._live = live
                self._update_live(s)
            return
        self._key, self._live = key, live
        self._update_identity(s, serving)
        self._update_live(s)

    def _update_identity(self, s: Snapshot, serving: str | None) -> None:
        """The server, the model and the devices: set again only when one of them (or a reason) changed."""
        pv, rs, m = s.provenance, s.reasons, s.model
        backend = SERVING_LABELS.get(serving, serving) if serving else s.backend or fmt.DASH
        version = f" {s.server_version}" if s.server_version else ""
        self.backend.set(f"<b>{backend}</b>{version}",
                         fmt.tip(f"Server backend and version at {s.url or fmt.DASH}", "server_version", pv, rs,
                                 unknown=s.server_version is None))
        bits = [b for b in (m.arch, _params(m.n_params), m.quantization) if b]
        name = m.name or fmt.DASH
        self.model.set(f"{name} <span style='color:{theme.hex_color('muted')}'>{' · '.join(bits)}</span>",
                       fmt.tip("Model: name, architecture, parameters, quantization"
                               + (f"\nWeights {fmt.bytes_(m.weight_bytes)}" if m.weight_bytes else "")
                               + (f"\nKV cache {m.kv_type_k or '?'}/{m.kv_type_v or '?'}" if m.kv_type_k else "")
                               + (f"\n{m.shape_note}" if m.shape_note else ""), "model", pv, rs,
                               unknown=m.name is None))
        h = s.host
        if s.gpus:
            names = [g.name or g.log_name or f"GPU {g.index}" for g in s.gpus]
            gtext = f"{len(names)}× {names[0]}" if len(set(names)) == 1 and len(names) > 1 else " + ".join(names)
            if h.in_ceiling:
                gtext += " + CPU"
            gtip = "\n".join(f"{'unified memory' if g.kind == 'unified_memory' else f'GPU {g.index}'}: "
                             f"{g.name or fmt.DASH}, peak {fmt.gb_s(g.peak_bandwidth_bytes_per_s)} "
                             f"({g.bandwidth_source or 'unknown source'})"
                             + (" — named in the server's log, not read here" if g.source == "log" else "")
                             for g in s.gpus)
            if h.in_ceiling:
                gtip += f"\nhost RAM: read by decode at {bandwidth_text(h)}"
        elif not h.in_ceiling:
            gtext = "no GPU data"
            gtip = f"GPU readings unavailable: {s.gpus_unavailable_reason or 'no GPU source'}"
        else:
            gtext = "CPU" + (f" · {h.memory_type}" if h.memory_type else "") + \
                (f" · {fmt.gb_s(h.host_bandwidth_bytes_per_s)}" if h.host_bandwidth_bytes_per_s else "")
            gtip = (f"No GPU: {s.gpus_unavailable_reason or 'no device source'}\nhost: {h.cpu_name or fmt.DASH}, "
                    f"{h.memory_type or 'memory type not reported'}, bandwidth {bandwidth_text(h)}")
        self.gpus.set(gtext, gtip)

    def _update_live(self, s: Snapshot) -> None:
        """Context, KV in use, decode against the ceiling and the efficiency: what moves while a reply decodes."""
        pv, rs, m = s.provenance, s.reasons, s.model
        ctx = fmt.tokens(s.context_tokens).removesuffix(" tokens")
        self.context.set(f"context <b>{ctx}</b> of {fmt.tokens(m.n_ctx)}"
                         + (f" · {len(s.slots)} slots" if len(s.slots) > 1 else ""), fmt.tip(
            "Context in use (deepest active conversation) / context per slot (n_ctx)"
            + (f"\nTokens until full: {fmt.tokens(s.forecast.tokens_until_ctx_full)}"),
            "context_tokens", pv, rs, unknown=s.context_tokens is None))
        self.kv.set(f"KV <b>{fmt.bytes_(s.kv_in_use_bytes)}</b> in use of {fmt.bytes_(s.kv_allocated_bytes)}"
                    f" ({m.kv_type_k or '?'}/{m.kv_type_v or '?'})", fmt.tip(
            "KV cache: bytes in use (read per token, decides speed) of bytes allocated at load (decides capacity)"
            f"\n{fmt.bytes_(m.kv_bytes_per_token)} per token of context", "kv_in_use_bytes", pv, rs,
            unknown=s.kv_in_use_bytes is None))
        dec, ceil = s.decode_tok_s, s.ceiling_tok_s
        suspect = s.ceiling_suspect
        # a speed above the ceiling means one of the ceiling's inputs is wrong: the ceiling shows as uncertain
        words = fmt.speed_words(s)
        self.speed.set(
            f"<b style='color:{theme.hex_color('decode')}'>{words.decode}</b>"
            f" <span style='color:{theme.hex_color('ceiling')}'>{words.against}</span>",
            fmt.tip("Decode speed now (generated tokens per second)", "decode_tok_s", pv, rs, unknown=dec is None)
            + "\n" + fmt.tip("Ceiling: what the memory bus allows at this context depth", "ceiling_tok_s", pv, rs,
                             unknown=ceil is None)
            + (f"\nUncertain: {suspect.message}" if suspect is not None else "")
            + (f"\n{spec}" if (spec := fmt.speculation_text(s)) else ""))
        if suspect is not None:
            self.efficiency.set(
                f"<span style='color:{theme.hex_color('warning')}'>ceiling uncertain</span>"
                f" <span style='font-size:8pt'>suspect: {suspect.input.replace('_', ' ')}</span>",
                f"Efficiency not shown: {suspect.message}")
        elif words.no_share:  # nothing decodes: no share to show (a lone dash read as a line beside the headline)
            self.efficiency.set("", "Efficiency (measured decode ÷ ceiling) is shown while a conversation decodes")
        else:
            self.efficiency.set(f"{words.share} <span style='font-size:8pt'>of ceiling</span>", fmt.tip(
                "Efficiency: measured decode ÷ ceiling", "efficiency", pv, rs, unknown=s.efficiency is None))
