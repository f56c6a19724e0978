"""Header: how the session stands (the verdict's sentence, in its level's colour), the big number (always decode
tok/s: measured now, or the last one dimmed with its age), the prompt's own slot, and the server, model, devices,
context and KV cache. Qt's own labels in plain text: a server's name like ``<b>x</b>`` shows as written.

The big number's column takes the right; on the left, the names (the demo's notice, the server, the model, the
devices) flow onto another row when they need it, as the model chips and the status bar do, and change only with
another server or model; under them the verdict (two lines of room; a longer sentence ends in "…", whole on hover)
and the context and KV cache. Every place follows the window's width (and the names) alone, never the figures of
the moment: the labels that change every poll have fixed sizes, so a new figure repaints its label and asks
nothing of the window's layout.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.serving import SERVING_LABELS
from kvmon.core.snapshot import Snapshot, VerdictLevel
from kvmon.gui import fmt, theme
from kvmon.gui.flow import FlowBox, stack
from kvmon.gui.panels.memory import bandwidth_text
from kvmon.gui.text import FitLabel

HEADLINE_LINES = 2
WIDEST_NUMBER = "8,888 tok/s"  # the big number's column is at least this wide, so a new figure never moves it
SPACING = 4 * theme.UNIT  # between the groups of names, and between the live part's columns
HERO_SHARE, HERO_MAX = 0.22, 260  # the big number's column: this share of the width, at most this many pixels
WIDEST_TOKENS = "88.8K"  # the widest figures the live row's templates hold
WIDEST_BYTES = ("88.8 GiB", "8.88 MiB", "888 MiB")  # (an "M" is wider than a "G": the widest of these)
# the prompt's line at the widest a narrow window still shows whole beside the live row (with the next reply's wait
# while a prompt cache is watched); where the KV cache's words leave less room, they are said in fewer ("KV cache 4.22
# GiB of 16.0 GiB", its types on hover)
PROMPT_ROOM, NEXT_ROOM = "prompt 8,888 tok/s · first token 88.8 s", " · next ~888 ms"


def _params(n: int | None) -> str | None:
    if n is None:
        return None
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _put(w: QtWidgets.QWidget, x: int, y: int, width: int) -> None:
    """Place a label at a fixed size: a new text in it then asks nothing of any layout (Qt's rule for fixed-size
    widgets)."""
    w.setFixedWidth(width)
    w.move(x, y)


def _group(*labels: QtWidgets.QWidget) -> QtWidgets.QWidget:
    """Names read together ("llama-server b11549"): one item of the flowing row."""
    box = stack(QtWidgets.QWidget(), *labels, across=True)
    box.setAutoFillBackground(True)
    return box


class HeaderPanel(QtWidgets.QFrame):
    """The numbers a person glances at: the verdict and the big number first, the server, model, devices, context
    and KV cache around them; every number has a tooltip that says what it is and where it came from."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("header")
        # the server, the model and the devices: each separately styled part a label of its own
        self.banner = FitLabel(bold=True, colour="info")  # a notice (the demo, a replay): not a warning
        self.backend = FitLabel(bold=True)
        self.version, self.model, self.gpus = FitLabel(), FitLabel(), FitLabel()
        self.details = FitLabel(colour="muted")
        self.names = FlowBox(self, h_gap=SPACING)
        self._groups = [_group(*g) for g in ((self.banner,), (self.backend, self.version), (self.model, self.details),
                                             (self.gpus,))]
        for group in self._groups:
            self.names.flow.addWidget(group)
        # what changes every poll: placed by hand at fixed sizes, so a new text repaints its label and asks nothing
        # of the window's layout
        self.headline = FitLabel(lines=HEADLINE_LINES, bold=True)
        self.context, self.kv = FitLabel(), FitLabel()
        self.speed = FitLabel(size="large", bold=True)
        self.efficiency = FitLabel(lines=2)  # "of 44.7 ceiling · 68%", or the last reply's age and the ceiling here
        self.prompt = FitLabel(colour="prefill")
        for w in (self.speed, self.efficiency, self.prompt):
            w.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignTop)
        for w in (self.headline, self.context, self.kv, self.speed, self.efficiency, self.prompt):
            w.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            w.setParent(self)
        # the room the live row's labels need at their widest figures: the context, the KV cache (in its words and in
        # fewer)
        self._context_w = self._kv_w = self._kv_short_w = 0
        self._prompt_w = 0  # the room the prompt's line needs at its widest (PROMPT_ROOM)
        policy = QtWidgets.QSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self._show_names()
        self._level: VerdictLevel | None = None
        self._live: bool | None = None
        self._prompt = ""  # the prompt's line in its whole words (fmt.hero)
        self._kv = ("", "", "")  # the KV cache's line in its words, in fewer, and its tooltip
        self._ahead = ("", "")  # the next reply's predicted wait for its first token ("2.3 s"), and its tooltip

    # --- where everything goes: the width decides, and the names (another server or model) --------------------
    def hero_width(self, width: int) -> int:
        """The big number's column: a share of the width, never narrower than the widest number."""
        big = self.speed.fontMetrics().horizontalAdvance(WIDEST_NUMBER) + 8
        return max(big, min(HERO_MAX, round(width * HERO_SHARE)))

    def _left_width(self, width: int) -> int:
        return max(1, width - 2 * theme.GAP - self.hero_width(width) - SPACING)

    def _names_height(self, width: int) -> int:
        """The names' rows (a row also while no name is known)."""
        return max(self.backend.height(), self.names.heightForWidth(self._left_width(width)))

    def _kv_short(self, width: int) -> bool:
        """The KV cache in fewer words: where its whole words leave the prompt's line too little room beside it."""
        left = self._left_width(width)
        beside = left + self.hero_width(width) - self._context_w - self._kv_w - SPACING  # the prompt's line's width
        return self._context_w + SPACING + self._kv_w <= left and beside < self._prompt_w

    def _kv_room(self, width: int) -> int:
        return self._kv_short_w if self._kv_short(width) else self._kv_w

    def _rows(self, width: int) -> int:
        """The live row's rows: the context and the KV cache side by side where both fit at their widest."""
        return 1 if self._context_w + SPACING + self._kv_room(width) <= self._left_width(width) else 2

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        left = (self._names_height(width) + self.headline.height()
                + self._rows(width) * self.context.height())
        right = self.speed.height() + self.efficiency.height() + self.prompt.height()
        return max(left, right)  # (the prompt on the bottom row when the left is the taller)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(800, self.heightForWidth(800))

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(self.hero_width(0) + 200, self.heightForWidth(self.width() or 800))

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._place()

    def event(self, e: QtCore.QEvent) -> bool:
        """A name that changed (another server or model) may need another number of rows: the window's layout is
        asked again then, never for a live figure (those labels have fixed sizes and ask nothing)."""
        if e.type() == QtCore.QEvent.Type.LayoutRequest:
            self._refit()
        return super().event(e)

    def _refit(self) -> None:
        if self.heightForWidth(self.width()) != self.height():
            self.updateGeometry()
        self._place()

    def _place(self) -> None:
        width = self.width()
        hero, left = self.hero_width(width), self._left_width(width)
        hx, y = width - theme.GAP - hero, 0
        for w in (self.speed, self.efficiency):
            _put(w, hx, y, hero)
            y += w.height()
        x, y = theme.GAP, self._names_height(width)
        self.names.setGeometry(x, 0, left, y)
        _put(self.headline, x, y, left)
        y += self.headline.height()
        if self._rows(width) == 1:
            _put(self.context, x, y, self._context_w or 1)
            kx = x + (self._context_w + SPACING if self._context_w else 0)
        else:
            _put(self.context, x, y, left)
            y += self.context.height()
            kx = x
        kv_w = max(1, min(self._kv_room(width) or left, x + left - kx))  # its widest figures' room, no more
        _put(self.kv, kx, y, kv_w)
        self._set_kv()
        # the prompt's line on the bottom row, right-aligned under the big number, with the room the live row leaves
        # beside it: "last prompt 5,200 tok/s · first token 9 ms" reads whole in a narrow window
        py = max(self.speed.height() + self.efficiency.height(), y)
        px = min(hx, kx + kv_w + SPACING)
        _put(self.prompt, px, py, hx + hero - px)
        self._set_prompt()

    def _set_prompt(self) -> None:
        """The prompt's line, with the next reply's predicted first token, in the most words that fit its room:
        "last prompt 5,200 tok/s · first token 9 ms · next ~2.3 s", else "prompt …"."""
        said, fewer = self._prompt, self._prompt.removeprefix("last ")
        ahead, ahead_tip = self._ahead
        if said and ahead:
            ways = [f"{said} · next ~{ahead}", f"{fewer} · next ~{ahead}", said, fewer]
        else:
            ways = [said, fewer] if said else [f"next reply's first token in ~{ahead}", f"next ~{ahead}"] if ahead \
                else [""]
        shown = next((w for w in ways if self.prompt.room_for(w) <= self.prompt.width()), ways[-1])
        tip = ["Prompt processing (prefill): tokens read per second, apart from decode"] if said else []
        if said.startswith("last "):
            tip.append("The last prompt's: how fast it was read, and how long its reply waited for its first token")
        if ahead_tip:
            tip.append(ahead_tip)
        self.prompt.set(shown, "\n".join(tip))

    def _set_kv(self) -> None:
        """The KV cache's line, in fewer words where the prompt's line needs the room (``_kv_short``)."""
        words, fewer, tip = self._kv
        self.kv.set(fewer if self._kv_short(self.width()) else words, tip)

    def set_room(self, context: str, kv: tuple[str, ...], kv_short: tuple[str, ...], prompt: str) -> None:
        """The live row's labels at their widest for this model (another model or server may need other room);
        ``kv``, ``kv_short``: the KV cache's line at each of the widest figures, in its words and in fewer;
        ``prompt``: the prompt's line at its widest."""
        room = (self.context.room_for(context), max(map(self.kv.room_for, kv), default=0),
                max(map(self.kv.room_for, kv_short), default=0), self.prompt.room_for(prompt))
        if room != (self._context_w, self._kv_w, self._kv_short_w, self._prompt_w):
            self._context_w, self._kv_w, self._kv_short_w, self._prompt_w = room
            self._refit()

    def _show_names(self) -> None:
        """Only the names there are take room in their row."""
        for label in (self.banner, self.backend, self.version, self.model, self.details, self.gpus):
            if label.isHidden() == bool(label.whole()):
                label.setVisible(bool(label.whole()))
        for group in self._groups:
            shown = any(not w.isHidden() for w in group.findChildren(FitLabel))
            if group.isHidden() == shown:
                group.setVisible(shown)

    def set_banner(self, text: str | None) -> None:
        """A line that must be seen (e.g. the demo notice): it leads the names' row."""
        if self.banner.set(text or ""):
            self._show_names()

    def update_snapshot(self, s: Snapshot) -> None:
        """Render one snapshot; a label is set only when its own text changed."""
        serving = s.serving.kind if s.serving is not None else None
        self._update_identity(s, serving)
        self._update_live(s)

    def _update_identity(self, s: Snapshot, serving: str | None) -> None:
        """The server, the model and the devices (names as the server gives them, shown as written), and the room
        the live row's figures take for this model."""
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
        self._show_names()
        self.set_room(self._context_text(s, WIDEST_TOKENS), tuple(self._kv_text(s, b) for b in WIDEST_BYTES),
                      tuple(self._kv_text(s, b, short=True) for b in WIDEST_BYTES),
                      PROMPT_ROOM + (NEXT_ROOM if s.prompt_cache is not None else ""))

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

    @staticmethod
    def _context_text(s: Snapshot, used: str | None = None) -> str:
        """"context 33.5K of 131K tokens" (``used``: in place of the tokens in use); "" when nothing is known."""
        if s.context_tokens is None and s.model.n_ctx is None:
            return ""
        used = used if used is not None else fmt.tokens(s.context_tokens).removesuffix(" tokens")
        slots = f" · {len(s.slots)} slots" if len(s.slots) > 1 else ""
        return f"context {used} of {fmt.tokens(s.model.n_ctx)}{slots}"

    @staticmethod
    def _kv_text(s: Snapshot, in_use: str | None = None, short: bool = False) -> str:
        """"KV cache 4.08 GiB in use of 16.0 GiB (f16/f16)", ``short``: "KV cache 4.08 GiB of 16.0 GiB" (its types
        on hover; ``in_use``: in place of the bytes in use)."""
        if s.kv_in_use_bytes is None and s.kv_allocated_bytes is None:
            return ""
        m = s.model
        types = f" ({m.kv_type_k}/{m.kv_type_v or m.kv_type_k})" if m.kv_type_k else ""
        in_use = in_use if in_use is not None else fmt.bytes_(s.kv_in_use_bytes)
        of = fmt.bytes_(s.kv_allocated_bytes)
        return f"KV cache {in_use} of {of}" if short else f"KV cache {in_use} in use of {of}{types}"

    def _update_live(self, s: Snapshot) -> None:
        """The verdict, the big number and what stands beside it, the context and the KV cache."""
        pv, rs, m = s.provenance, s.reasons, s.model
        v = s.verdict
        level = v.level if v is not None else VerdictLevel.OK
        if level != self._level:
            self._level = level
            theme.tint(self.headline, level.value)
        self.headline.set(v.sentence if v is not None else "", f"{v.state}: {v.sentence}" if v is not None else "")
        h = fmt.hero(s)
        if h.live != self._live:
            self._live = h.live
            theme.tint(self.speed, "decode" if h.live else "muted")
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
        self._prompt = h.prompt
        _said, ahead_tip = fmt.next_reply_text(s)  # (said here in fewer words, beside the last prompt's wait)
        wait = s.prompt_cache.next_ttft_s if s.prompt_cache is not None else None
        self._ahead = (fmt.wait(wait), ahead_tip) if ahead_tip and wait is not None else ("", "")
        self._set_prompt()
        context = self._context_text(s)
        self.context.set(context, fmt.tip(
            "Context in use (the deepest conversation) of the context one conversation can hold"
            f"\nTokens until full: {fmt.tokens(s.forecast.tokens_until_ctx_full)}",
            "context_tokens", pv, rs, unknown=s.context_tokens is None) if context else "")
        kv = self._kv_text(s)
        types = f"\nKV cache type {m.kv_type_k}/{m.kv_type_v or m.kv_type_k}" if m.kv_type_k else ""
        self._kv = (kv, self._kv_text(s, short=True), fmt.tip(
            "KV cache: in use (read for every token: it decides speed) of allocated at load (it decides what fits)"
            f"\n{fmt.bytes_(m.kv_bytes_per_token)} per token of context{types}", "kv_in_use_bytes", pv, rs,
            unknown=s.kv_in_use_bytes is None) if kv else "")
        self._set_kv()
