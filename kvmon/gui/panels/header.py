"""Header: how the session stands (the verdict's sentence, in its level's colour), the big number (always decode
tok/s: measured now, or the last one dimmed with its age), the prompt's own slot, and the server, model, devices,
context and KV cache. Qt's own labels in plain text: a server's name like ``<b>x</b>`` shows as written.

The rows are decided by the window's width, never by the text of the moment: the headline keeps two lines of room
(a longer sentence is shortened with "…", whole on hover), the big number a column as wide as its widest figure.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.serving import SERVING_LABELS
from kvmon.core.snapshot import Snapshot, VerdictLevel
from kvmon.gui import fmt, theme
from kvmon.gui.panels.memory import bandwidth_text

HEADLINE_PT = 12.0  # the three type sizes: the body's, the headline's, the big number's
HERO_PT = 20.0
HEADLINE_LINES = 2
WIDEST_NUMBER = "8,888 tok/s"  # the big number's column is this wide, so a new figure never moves it


def _params(n: int | None) -> str | None:
    if n is None:
        return None
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _colour(label: QtWidgets.QLabel, colour: str) -> None:
    """Set a label's text colour (its palette: no style sheet is parsed again)."""
    pal = label.palette()
    pal.setColor(QtGui.QPalette.ColorRole.WindowText, QtGui.QColor(colour))
    label.setPalette(pal)


def level_colour(level: VerdictLevel) -> str:
    """The headline's colour for a verdict level: the severity palette, "ok" when nothing is wrong."""
    return theme.hex_color(level.value)


class Line(QtWidgets.QLabel):
    """A plain-text label that never asks for more room than its row has: a text too long for it is shortened with
    "…" and said whole on hover. ``set`` changes nothing when the text and tooltip are the same."""

    def __init__(self, lines: int = 1, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self._lines = lines  # lines of room: a longer text is broken between words by ``_fit``, not by Qt
        if lines > 1:  # one line or two, it starts at the same place
            self.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignTop)
        self._whole = ""
        self._tip = ""
        pol = QtWidgets.QSizePolicy.Policy
        self.setSizePolicy(pol.Ignored if lines > 1 else pol.Preferred, pol.Fixed)
        self._fix_height()

    def _fix_height(self) -> None:
        fm = self.fontMetrics()
        self.setFixedHeight(fm.lineSpacing() * self._lines + 2)

    def whole(self) -> str:
        """The whole text (``text()`` is what is drawn, shortened when it does not fit)."""
        return self._whole

    def set(self, text: str, tip: str | None = None) -> None:
        tip = tip if tip is not None else self._tip
        if text == self._whole and tip == self._tip:
            return
        self._whole, self._tip = text, tip
        self._fit()

    def set_point_size(self, pt: float, bold: bool = False) -> None:
        f = self.font()
        f.setPointSizeF(pt)
        f.setBold(bold)
        self.setFont(f)
        self._fix_height()

    def sizeHint(self) -> QtCore.QSize:
        if self._lines > 1:
            return QtCore.QSize(0, self.height())
        return QtCore.QSize(self.fontMetrics().horizontalAdvance(self._whole) + 4, self.height())

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(min(48, self.sizeHint().width()), self.height())

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        if e.size().width() != e.oldSize().width():
            self._fit()

    def showEvent(self, e: QtGui.QShowEvent) -> None:
        super().showEvent(e)
        self._fit()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() == QtCore.QEvent.Type.FontChange:
            self._fix_height()
            self._fit()

    def _wrapped(self, text: str, width: int) -> str:
        """``text`` broken into at most ``self._lines`` lines of ``width`` pixels, only between words (never inside
        "tok/s"); the last line shortened with "…" when the rest does not fit."""
        fm = self.fontMetrics()
        lines: list[str] = []
        words = text.split(" ")
        while words and len(lines) < self._lines:
            line = words.pop(0)
            while words and fm.horizontalAdvance(f"{line} {words[0]}") <= width:
                line = f"{line} {words.pop(0)}"
            lines.append(line)
        if words or (lines and fm.horizontalAdvance(lines[-1]) > width):
            last = " ".join([lines.pop(), *words]) if lines else " ".join(words)
            lines.append(fm.elidedText(last, QtCore.Qt.TextElideMode.ElideRight, width))
        return "\n".join(lines)

    def _fit(self) -> None:
        """Draw the whole text when it fits, else as much of it as does, ending in "…"."""
        width = max(1, self.width() - 2)
        text = self._whole
        if not self.isVisible() or width < 8:  # not laid out yet: whole, fitted when it gets its size
            shown = text
        elif self._lines == 1:
            shown = self.fontMetrics().elidedText(text, QtCore.Qt.TextElideMode.ElideRight, width)
        else:
            shown = self._wrapped(text, width)
        cut = shown.replace("\n", " ") != text
        tip = "\n".join(x for x in (text if cut else "", self._tip) if x)
        if shown != super().text():
            self.setText(shown)
            self.updateGeometry()
        if tip != self.toolTip():
            self.setToolTip(tip)


class HeaderPanel(QtWidgets.QFrame):
    """The numbers a person glances at: the verdict and the big number first, the server, model, devices, context
    and KV cache around them; every number has a tooltip that says what it is and where it came from."""

    SPACING = 16

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("header")
        self.banner = Line()
        self.banner.set_point_size(self.font().pointSizeF(), bold=True)
        self.banner.hide()
        # the server, the model and the devices: each separately styled part a label of its own
        self.backend, self.version, self.model, self.details, self.gpus = (Line() for _ in range(5))
        self.backend.set_point_size(self.font().pointSizeF(), bold=True)
        _colour(self.details, theme.hex_color("muted"))
        # the verdict's sentence, in its level's colour, with two lines of room
        self.headline = Line(HEADLINE_LINES)
        self.headline.set_point_size(HEADLINE_PT, bold=True)
        # the big number (decode tok/s), what it stands against, and the prompt's own slot
        self.speed = Line()
        self.speed.set_point_size(HERO_PT, bold=True)
        self.speed.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.efficiency = Line()  # "of 44.7 ceiling · 68%", or the last reply's age and the ceiling here
        self.prompt = Line()
        for w in (self.efficiency, self.prompt):
            w.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        _colour(self.prompt, theme.hex_color("prefill"))
        self.context, self.kv = Line(), Line()
        self._level: VerdictLevel | None = None
        self._live: bool | None = None
        self._build()
        self._key: tuple[object, ...] | None = None  # what the identity labels were made from
        self._live_key: tuple[object, ...] | None = None  # ... and the live ones

    def _build(self) -> None:
        grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(8, 2, 8, 2)
        grid.setHorizontalSpacing(self.SPACING)
        grid.setVerticalSpacing(0)
        # the demo's notice leads the names' row (a row of its own would take the plots' room in a small window)
        names = QtWidgets.QHBoxLayout()
        names.setSpacing(6)
        for w in (self.banner, self.backend, self.version, self.model, self.details, self.gpus):
            names.addWidget(w, 0)
        names.addStretch(1)
        names.insertSpacing(1, self.SPACING - 6)
        names.insertSpacing(4, self.SPACING - 6)
        names.insertSpacing(8, self.SPACING - 6)
        grid.addLayout(names, 1, 0, 1, 2)
        grid.addWidget(self.headline, 2, 0, 2, 1)
        live = QtWidgets.QHBoxLayout()
        live.setSpacing(self.SPACING)
        live.addWidget(self.context)
        live.addWidget(self.kv)
        live.addStretch(1)
        grid.addLayout(live, 4, 0)
        hero = QtWidgets.QVBoxLayout()
        hero.setSpacing(0)
        for w in (self.speed, self.efficiency, self.prompt):
            hero.addWidget(w)
        grid.addLayout(hero, 2, 1, 3, 1, QtCore.Qt.AlignmentFlag.AlignTop)
        big = QtGui.QFontMetrics(self.speed.font()).horizontalAdvance(WIDEST_NUMBER) + 8
        self.speed.setMinimumWidth(big)
        self.efficiency.setMinimumWidth(big)
        grid.setColumnStretch(0, 1)
        grid.setColumnMinimumWidth(1, big)

    def set_banner(self, text: str | None) -> None:
        """A line that must be seen (e.g. the demo notice)."""
        self.banner.set(text or "")
        self.banner.setVisible(bool(text))

    def update_snapshot(self, s: Snapshot) -> None:
        """Render one snapshot; a label is set only when its own text changed."""
        serving = s.serving.kind if s.serving is not None else None
        key = (s.backend, serving, s.server_version, s.url, s.model, s.provenance, s.reasons, s.gpus_unavailable_reason,
               tuple((g.index, g.name, g.log_name, g.peak_bandwidth_bytes_per_s, g.bandwidth_source, g.kind, g.source)
                     for g in s.gpus),
               (s.host.in_ceiling, s.host.host_bandwidth_bytes_per_s, s.host.memory_type, s.host.cpu_name))
        if key != self._key:
            self._key = key
            self._update_identity(s, serving)
        live = (s.verdict, s.context_tokens, len(s.slots), s.forecast.tokens_until_ctx_full, s.kv_in_use_bytes,
                s.kv_allocated_bytes, s.decode_tok_s, s.ceiling_tok_s, s.efficiency, s.ceiling_suspect,
                s.prefill_tok_s, s.activity, s.speculative, s.last_decode, s.latency, s.slowdown_causes,
                s.prompt_cache.next_ttft_s if s.prompt_cache is not None else None,
                s.t_monotonic if s.decode_tok_s is None else None)  # the last reply's age moves while nothing decodes
        if live != self._live_key:
            self._live_key = live
            self._update_live(s)

    def _update_identity(self, s: Snapshot, serving: str | None) -> None:
        """The server, the model and the devices (names as the server gives them, shown as written)."""
        pv, rs, m = s.provenance, s.reasons, s.model
        backend = SERVING_LABELS.get(serving, serving) if serving else s.backend or ""
        self.backend.set(backend, fmt.tip(f"Server at {s.url or fmt.DASH}", "server_version", pv, rs,
                                          unknown=bool(backend) and s.server_version is None))
        self.version.set(s.server_version or "", "The server's version" if s.server_version else "")
        bits = [b for b in (m.arch, _params(m.n_params), m.quantization) if b]
        self.model.set(m.name or "", fmt.tip("Model" + (f"\nWeights {fmt.bytes_(m.weight_bytes)}" if m.weight_bytes
                                                      else "")
                                             + (f"\nKV cache {m.kv_type_k}/{m.kv_type_v or m.kv_type_k}"
                                                if m.kv_type_k else "")
                                             + (f"\n{m.shape_note}" if m.shape_note else ""), "model", pv, rs,
                                             unknown=m.name is None and s.server_read))
        self.details.set(" · ".join(bits), "Architecture · parameters · quantization")
        self.gpus.set(*self._devices(s))

    def _devices(self, s: Snapshot) -> tuple[str, str]:
        h = s.host
        if s.gpus:
            names = [g.name or g.log_name or f"GPU {g.index}" for g in s.gpus]
            text = f"{len(names)}× {names[0]}" if len(set(names)) == 1 and len(names) > 1 else " + ".join(names)
            if h.in_ceiling:
                text += " + CPU"
            tip = "\n".join(f"{'unified memory' if g.kind == 'unified_memory' else f'GPU {g.index}'}: "
                            f"{g.name or fmt.DASH}, peak {fmt.gb_s(g.peak_bandwidth_bytes_per_s)}"
                            + (" — named in the server's log, not read here" if g.source == "log" else "")
                            for g in s.gpus)
            if h.in_ceiling:
                tip += f"\nhost RAM: read by decode at {bandwidth_text(h)}"
            return text, tip
        if h.in_ceiling:
            text = "CPU" + (f" · {h.memory_type}" if h.memory_type else "") + \
                (f" · {fmt.gb_s(h.host_bandwidth_bytes_per_s)}" if h.host_bandwidth_bytes_per_s else "")
            return text, (f"No GPU: {s.gpus_unavailable_reason or 'no device source'}\nhost: {h.cpu_name or fmt.DASH}, "
                          f"{h.memory_type or 'memory type not reported'}, bandwidth {bandwidth_text(h)}")
        if not s.server_read:
            return "", ""
        return "no GPU data", f"GPU readings unavailable: {s.gpus_unavailable_reason or 'no GPU source'}"

    def _update_live(self, s: Snapshot) -> None:
        """The verdict, the big number and what stands beside it, the context and the KV cache."""
        pv, rs, m = s.provenance, s.reasons, s.model
        v = s.verdict
        level = v.level if v is not None else VerdictLevel.OK
        if level != self._level:
            self._level = level
            _colour(self.headline, level_colour(level))
        self.headline.set(v.sentence if v is not None else "", f"{v.state}: {v.sentence}" if v is not None else "")
        h = fmt.hero(s)
        if h.live != self._live:
            self._live = h.live
            _colour(self.speed, theme.hex_color("decode" if h.live else "muted"))
        last = s.last_decode
        measured = ("Decode speed: generated tokens per second, measured at this poll" if h.live else
                    "The last decode speed measured (dimmed: nothing decodes now)" if last is not None else
                    "Decode speed: none measured yet")
        if last is not None and not h.live and last.context_tokens is not None:
            measured += f", at {fmt.tokens(last.context_tokens)}"
        if s.decode_before is not None and s.forecast.regime.description:
            measured += (f"\nBefore {s.forecast.regime.description}: {fmt.tok_s(s.decode_before.tok_s)}")
        self.speed.set(h.number, fmt.tip(measured, "decode_tok_s", pv, rs, unknown=s.decode_tok_s is None and h.live))
        tip = fmt.tip("Ceiling: what the memory bus allows at this context depth", "ceiling_tok_s", pv, rs,
                      unknown=s.ceiling_tok_s is None)
        if s.ceiling_suspect is not None:
            tip += f"\nUncertain: {s.ceiling_suspect.message}"
        if h.share:
            tip += "\nShare of the ceiling: measured decode ÷ ceiling"
        if spec := fmt.speculation_text(s):
            tip += f"\n{spec}"
        if why := fmt.causes_text(s):
            tip += f"\n{why}"
        self.efficiency.set(h.against, tip)
        self.prompt.set(h.prompt, "Prompt processing (prefill): tokens read per second, apart from decode"
                        if h.prompt else "")
        ctx = fmt.tokens(s.context_tokens).removesuffix(" tokens")
        if s.context_tokens is None and m.n_ctx is None:
            self.context.set("", "")
        else:
            slots = f" · {len(s.slots)} slots" if len(s.slots) > 1 else ""
            ahead, ahead_tip = fmt.next_reply_text(s)
            self.context.set(f"context {ctx} of {fmt.tokens(m.n_ctx)}{slots}" + (f" · {ahead}" if ahead else ""),
                             fmt.tip("Context in use (the deepest conversation) of the context one conversation can "
                                     f"hold\nTokens until full: {fmt.tokens(s.forecast.tokens_until_ctx_full)}"
                                     + (f"\n{ahead_tip}" if ahead_tip else ""),
                                     "context_tokens", pv, rs, unknown=s.context_tokens is None))
        if s.kv_in_use_bytes is None and s.kv_allocated_bytes is None:
            self.kv.set("", "")
        else:
            types = f" ({m.kv_type_k}/{m.kv_type_v or m.kv_type_k})" if m.kv_type_k else ""
            self.kv.set(f"KV cache {fmt.bytes_(s.kv_in_use_bytes)} in use of {fmt.bytes_(s.kv_allocated_bytes)}{types}",
                        fmt.tip("KV cache: in use (read for every token: it decides speed) of allocated at load (it "
                                f"decides what fits)\n{fmt.bytes_(m.kv_bytes_per_token)} per token of context",
                                "kv_in_use_bytes", pv, rs, unknown=s.kv_in_use_bytes is None))
