"""The caption strip on exported images (the headline's news, model, GPU(s), context, tok/s, ceiling, the server's own
name, kvmon version) and file names.

A shared picture must say what it shows without the window around it, and must never carry a credential:
every text that ends up in an export passes ``scrub`` (``kvmon.core.redact``, named here for the exporters).
"""

from __future__ import annotations

import re
import time

from PySide6 import QtCore, QtGui

from kvmon import __version__
from kvmon.core.backend import backend_of
from kvmon.core.redact import scrub
from kvmon.core.serving import SERVING_LABELS
from kvmon.core.snapshot import Snapshot
from kvmon.core.units import DASH, fmt_tokens
from kvmon.gui.fmt import hero

__all__ = ["caption_text", "default_filename", "gpu_text", "scrub", "server_label", "with_caption"]

_FILE_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
STRIP_PAD_PX = 6


def gpu_text(s: Snapshot) -> str:
    """'2× RTX 3090', 'RTX 4090 + RTX 3060', 'CPU (DDR5-6000)' when the CPU decodes with no GPU, or 'no GPU data'."""
    names = [g.name or f"GPU {g.index}" for g in s.gpus]
    if not names and s.host.in_ceiling:
        return "CPU" + (f" ({s.host.memory_type})" if s.host.memory_type else "")
    if not names:
        return "no GPU data"
    if len(names) > 1 and len(set(names)) == 1:
        return f"{len(names)}× {names[0]}"
    return " + ".join(names)


def server_label(s: Snapshot) -> str:
    """The server as people name it: a router's or llama-swap's own name, else its backend's ("Ollama", "vLLM")."""
    if s.serving is not None:
        return SERVING_LABELS.get(s.serving.kind, s.serving.kind)
    if not s.backend:
        return ""
    return backend_of(s.backend).label or str(s.backend)


def caption_text(s: Snapshot | None, *, when_wall: float | None = None) -> str:
    """One line that makes a picture explain itself: the headline's news, then what it shows; no URL, so no
    credential can leak through it."""
    version = f"kvmon {__version__}"
    if s is None:
        return f"no data yet · {version}"
    m = s.model
    model = " ".join(b for b in (m.name or DASH, f"({m.quantization})" if m.quantization else "") if b)
    kv = f" · KV {m.kv_type_k}/{m.kv_type_v}" if m.kv_type_k else ""
    ctx = f"context {fmt_tokens(s.context_tokens).removesuffix(' tokens')} of {fmt_tokens(m.n_ctx)}"
    h = hero(s)  # the header's big number and its words, for the same snapshot
    speed = h.against if s.last_decode is None and s.decode_tok_s is None else f"{h.number} {h.against}".strip()
    news = s.verdict.sentence if s.verdict is not None and s.verdict.sentence else ""
    server = " ".join(x for x in (server_label(s), s.server_version or "") if x)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.t_wall if when_wall is None else when_wall))
    parts = [news] if news else []
    if s.server_read or m.name:
        parts += [f"{model}{kv}", gpu_text(s), ctx, speed]
    parts += [x for x in (server, stamp, version) if x]
    return scrub(" · ".join(parts))


def default_filename(s: Snapshot | None, ext: str, *, now_wall: float | None = None, what: str = "") -> str:
    """kvmon-<model>[-<what>]-<YYYYmmdd-HHMMSS>.<ext>, with only [A-Za-z0-9._-] in the model part."""
    model = (s.model.name if s is not None else None) or "no-model"
    model = _FILE_SAFE.sub("-", model.removesuffix(".gguf")).strip("-.") or "model"
    part = f"-{_FILE_SAFE.sub('-', what).strip('-')}" if what else ""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now_wall is None else now_wall))
    return f"kvmon-{model[:80]}{part}-{stamp}.{ext.lstrip('.')}"


def with_caption(image: QtGui.QImage, text: str, *, dark: bool = True) -> QtGui.QImage:
    """A copy of ``image`` with a caption strip below it (same width, same device pixel ratio)."""
    dpr = image.devicePixelRatio() or 1.0
    font = QtGui.QFont()
    font.setPointSizeF(9.0)
    metrics = QtGui.QFontMetricsF(font)
    width_px = image.width()
    logical_w = width_px / dpr
    # wrap to the width: a caption cut off at the right edge would lose the kvmon version
    doc_lines = _wrap(text, metrics, logical_w - 2 * STRIP_PAD_PX)
    strip_h_logical = len(doc_lines) * metrics.height() + 2 * STRIP_PAD_PX
    out = QtGui.QImage(width_px, image.height() + round(strip_h_logical * dpr), QtGui.QImage.Format.Format_ARGB32)
    out.setDevicePixelRatio(dpr)
    bg, fg = (QtGui.QColor("#1e1e1e"), QtGui.QColor("#e0e0e0")) if dark else (QtGui.QColor("#f4f4f4"),
                                                                                 QtGui.QColor("#202020"))
    out.fill(bg)
    with QtGui.QPainter(out) as p:  # ended whatever happens
        p.drawImage(QtCore.QPointF(0, 0), image)
        p.setFont(font)
        p.setPen(fg)
        y = image.height() / dpr + STRIP_PAD_PX + metrics.ascent()
        for line in doc_lines:
            p.drawText(QtCore.QPointF(STRIP_PAD_PX, y), line)
            y += metrics.height()
    return out


def _wrap(text: str, metrics: QtGui.QFontMetricsF, width: float) -> list[str]:
    """Greedy wrap at ' · ' separators to fit ``width`` logical pixels; a part wider than a line breaks at spaces
    (the compact view's strip is narrower than the verdict's sentence)."""
    pieces: list[tuple[str, str]] = []  # (words, what joins them to the piece before)
    for i, part in enumerate(text.split(" · ")):
        sep = " · " if i else ""
        if metrics.horizontalAdvance(part) <= width:
            pieces.append((part, sep))
        else:
            pieces += [(w, sep if j == 0 else " ") for j, w in enumerate(part.split(" "))]
    lines: list[str] = []
    cur = ""
    for piece, sep in pieces:
        cand = f"{cur}{sep}{piece}" if cur else piece
        if cur and metrics.horizontalAdvance(cand) > width:
            lines.append(cur)
            cur = piece
        else:
            cur = cand
    if cur:
        lines.append(cur)
    return lines or [""]
