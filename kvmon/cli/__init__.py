"""kvmon's one entry point: the dashboard by default, plus once/sim/proxy/screenshot/replay/serve, and the
installation's own flags (--self-test, --install-desktop, --uninstall-desktop, --print-path, --version).

Each subcommand's work lives in its own module, imported only when that subcommand runs, so that
``kvmon once`` never loads Qt and ``kvmon --version`` is instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kvmon import __version__
from kvmon.gui import PANEL_ATTRS
from kvmon.resources import NAMED

# each subcommand and what runs it: "module:function" (args) -> exit status, imported only when it runs
SUBCOMMANDS: dict[str, str] = {
    "once": "kvmon.cli.once:run", "sim": "kvmon.cli.sim:run", "proxy": "kvmon.cli.proxy:run",
    "screenshot": "kvmon.cli.screenshot:run", "replay": "kvmon.gui.app:run_replay", "serve": "kvmon.cli.serve:run",
    "sweep": "kvmon.cli.sweep:run", "compare": "kvmon.cli.compare:run",
}
TIMEOUT_S = 3.0
TIMEOUT_HELP = ("seconds a poll waits on the server, all its requests together (default %(default)g); an endpoint "
                "that hangs costs at most this once, then is asked with a short limit while the rest is read")


def bandwidth_arg(text: str) -> str:
    """``--bandwidth DEVICE=GB/s``, checked here so that a typo is a clear usage error, not a surprise later."""
    from kvmon.core.analysis.settings import BandwidthSpecError, parse_bandwidth

    try:
        parse_bandwidth(text)
    except BandwidthSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def timeout_arg(text: str) -> float:
    """``--timeout SECONDS``: a number of seconds above 0 (a clear usage error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def window_size(text: str) -> tuple[int, int]:
    """``--size WxH``: a window size in pixels, at least 400×300 (a clear usage error otherwise)."""
    w, sep, h = text.lower().partition("x")
    try:
        size = (int(w), int(h)) if sep else None
    except ValueError:
        size = None
    if size is None or size[0] < 400 or size[1] < 300 or max(size) > 8192:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size like 1280x800 (at least 400x300)")
    return size


AFTER_HELP = ("seconds of the session to watch before {what}: simulated seconds with --demo (at --speed 10, 60 of them "
              "pass in 6 real seconds), real ones against a server")


def speed_arg(text: str) -> float:
    """``--speed X``: simulated seconds per real second, above 0 (a clear usage error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (simulated seconds per real second)") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: give simulated seconds per real second, above 0 and up to 1000")
    return value


def _add_demo_args(p: argparse.ArgumentParser, seconds: Callable[[str], float], *, waits: bool = True) -> None:
    """``--speed X`` and ``--start-at T``, the same for every command that can run the demo."""
    p.add_argument("--start-at", type=seconds, default=0.0, metavar="T",
                   help="with --demo: join the scenario's story T simulated seconds in (its key moments are listed "
                        "below)")
    p.add_argument("--speed", type=speed_arg, default=1.0, metavar="X",
                   help="with --demo: simulated seconds per real second (default 1)" + (
                       "" if waits else "; once never waits, so it changes nothing here"))


API_KEY_HELP = ("API key for the server. Every user of this machine can read a command line (ps, /proc): prefer "
                "the environment variable KVMON_API_KEY, or the dashboard's Tools > Settings (kept in the system "
                "keychain)")


def _add_connection_args(p: argparse.ArgumentParser, *, url: bool = True) -> None:
    """The server's URL (the dashboard's is read before parsing: a subcommand's name could be taken for one), key,
    log, timeout, devices and bandwidths."""
    if url:
        p.add_argument("url", nargs="?", default=None, help="server URL (default: auto-detect on this machine)")
    p.add_argument("--api-key", default=None, help=API_KEY_HELP)
    p.add_argument("--log", default=None, metavar="FILE",
                   help="the server's log file (start llama-server with -lv 4): devices, layers, buffers, KV type")
    p.add_argument("--timeout", type=timeout_arg, default=TIMEOUT_S, metavar="SECONDS", help=TIMEOUT_HELP)
    p.add_argument("--devices", default=None, metavar="URL",
                   help="GPU and RAM readings of the server's machine from a `kvmon serve` running there "
                   "(http://HOST:9464)")
    p.add_argument("--bandwidth", action="append", type=bandwidth_arg, metavar="DEVICE=GB/s", default=None,
                   help="set or override a device's peak memory bandwidth, repeatable: host=60 (host RAM), "
                        "0=936 (a device by kvmon's number), CUDA0=936 / ROCm0=960 / MTL0=400 (by the server's name)")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help may end with text made only when help is asked (``help_tail``): the scenario
    list loads the simulator's tables, which ``kvmon --version`` and every normal start do without."""

    help_tail: Callable[[], str] | None = None

    def format_help(self) -> str:
        if self.help_tail is not None:
            self.epilog = self.help_tail()
            self.formatter_class = argparse.RawDescriptionHelpFormatter
        return super().format_help()


def _scenarios_help() -> str:
    from kvmon.sim.catalog import scenarios_help

    return scenarios_help()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, documented in the README."""
    parser = _Parser(
        prog="kvmon",
        description="Live decode speed against the memory-bandwidth ceiling, KV cache and VRAM headroom "
        "for llama-server, Ollama, vLLM and LM Studio.",
    )
    parser.add_argument("--version", action="version", version=f"kvmon {__version__}")
    sub = parser.add_subparsers(dest="command")

    from kvmon.cli.sim import add_arguments as add_sim_arguments  # argparse only: no server code loads
    from kvmon.cli.sim import seconds

    once = sub.add_parser("once", help="two polls ~1 s apart, print one reading and exit")
    _add_connection_args(once)
    once.add_argument("--json", action="store_true", help="print the documented JSON document")
    once.add_argument("--interval", type=float, default=1.0, help="seconds between the two polls")
    once.add_argument("--list", action="store_true",
                      help="list every server found on this machine (processes, then the default ports) and exit")
    once.add_argument("--demo", default=None, metavar="SCENARIO",
                      help="read the built-in simulator instead of a server (the scenarios: kvmon sim --help): the "
                           "document the dashboard shows at that point of the story")
    _add_demo_args(once, seconds, waits=False)
    once.add_argument("--after", type=seconds, default=None, metavar="SECONDS",
                      help=AFTER_HELP.format(what="printing") + " (with --demo: a poll every --interval, default one "
                           "interval, two polls; once never waits for the simulator)")
    once.help_tail = _scenarios_help

    sim = sub.add_parser("sim", help="run a simulated server alone (llama-server, Ollama, vLLM, LM Studio)")

    add_sim_arguments(sim)
    sim.help_tail = _scenarios_help

    proxy = sub.add_parser("proxy", help="pass-through proxy that measures requests (Ollama, llama-server, LM Studio)")
    proxy.add_argument("--listen", default="127.0.0.1:11435")
    proxy.add_argument("--upstream", default="http://127.0.0.1:11434")
    from kvmon.proxy import UPSTREAM_TIMEOUT_S  # a constant only: no server code loads

    proxy.add_argument("--upstream-timeout", type=float, default=UPSTREAM_TIMEOUT_S, metavar="SECONDS",
                       help="the longest the upstream may take to begin its answer, or go quiet in the middle of one "
                            "(default %(default)g s: loading a model and a long prompt come first); past it the "
                            "client gets a 504 with the reason, or the rest of the answer is cut off; 0: no limit")

    shot = sub.add_parser("screenshot", help="headless capture of the dashboard")
    _add_connection_args(shot)
    shot.add_argument("--demo", nargs="?", const="seed-3090x2", default=None, metavar="SCENARIO",
                      help="capture the built-in simulator (default seed-3090x2; the scenarios are listed below); "
                           "without it and without a URL, the first server found on this machine")
    shot.add_argument("--after", type=seconds, default=5.0, metavar="SECONDS",
                      help=AFTER_HELP.format(what="capturing") + " (default %(default)g)")
    shot.add_argument("-o", "--output", required=True, help="PNG file to write")
    shot.add_argument("--panel", default=None, help=f"one panel only: {', '.join(PANEL_ATTRS)}")
    _add_demo_args(shot, seconds)
    shot.add_argument("--no-caption", dest="caption", action="store_false", help="no caption strip below the image")
    shot.add_argument("--size", type=window_size, default=(1280, 800), metavar="WxH",
                      help="the window's size in pixels, caption included (default 1280x800)")
    shot.add_argument("--theme", choices=("system", "light", "dark"), default="system",
                      help="the colour scheme to draw in (default: the desktop's)")
    shot.add_argument("--compact", action="store_true", help="the compact view instead of the full window")
    shot.help_tail = _scenarios_help

    replay = sub.add_parser("replay", help="open a recorded session in the dashboard")
    replay.add_argument("file", help="a .jsonl recording")
    replay.add_argument("--csv", default=None, metavar="OUT.csv",
                        help="write the recording as CSV (one row per snapshot) and exit")

    serve = sub.add_parser("serve", help="headless Prometheus exporter of kvmon's readings")
    _add_connection_args(serve)
    serve.add_argument("--listen", default="127.0.0.1:9464")
    serve.add_argument("--url", action="append", default=[], dest="urls", metavar="URL",
                       help="one more server to watch (repeatable); every series carries its server label")

    from kvmon.cli import compare, sweep  # their arguments only: the work loads when they run

    sweep.add_parser(sub, _add_connection_args)
    compare.add_parser(sub)

    # The dashboard (no subcommand).
    parser.add_argument("--demo", nargs="?", const="seed-3090x2", default=None, metavar="SCENARIO",
                        help="open the dashboard on the built-in simulator (default seed-3090x2; the scenarios "
                             "and their key moments are listed below)")
    _add_demo_args(parser, seconds)
    parser.add_argument("--record", default=None, metavar="FILE", help="record every snapshot to FILE.jsonl")
    parser.add_argument("--compact", action="store_true",
                        help="start in the compact view, a small window to keep beside the chat (Ctrl+M: full)")
    install = parser.add_mutually_exclusive_group()
    install.add_argument("--self-test", action="store_true", help="render the dashboard offscreen once; exit 0 if ok")
    install.add_argument("--install-desktop", action="store_true",
                         help="put this kvmon in your applications menu (Linux: a desktop entry and icons under "
                              "$XDG_DATA_HOME or ~/.local/share), say what was written, and exit")
    install.add_argument("--uninstall-desktop", action="store_true",
                         help="remove what --install-desktop wrote, and exit")
    install.add_argument("--print-path", choices=sorted(NAMED), default=None, metavar="NAME",
                         help="print where this installation keeps a file and exit: grafana (the fleet dashboard), "
                              "prometheus-rules (alerting rules), desktop, metainfo, icon, resources (the folder)")
    _add_connection_args(parser, url=False)
    parser.add_argument("--interval", type=float, default=1.0, help="poll interval in seconds")
    parser.help_tail = _scenarios_help
    return parser


def _print_path(name: str) -> int:
    """``kvmon --print-path NAME``: the file's absolute path on stdout (0), or why it is not there (1)."""
    from kvmon.resources import named_path

    path = named_path(name)
    if path is None:
        print(f"kvmon: {NAMED[name]} is missing from this installation's kvmon/resources", file=sys.stderr)
        return 1
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the chosen command; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # A bare URL as the first word means "dashboard on URL", not a subcommand.
    url: str | None = None
    if args_list and not args_list[0].startswith("-") and args_list[0] not in SUBCOMMANDS:
        url = args_list.pop(0)
    args = parser.parse_args(args_list)
    args.url = url if args.command is None else getattr(args, "url", None)
    demo = getattr(args, "demo", None)
    if demo is not None and args.command in (None, "screenshot"):  # before a window or a display is looked for
        from kvmon.sim.catalog import check

        try:
            check(demo)
        except ValueError as exc:
            print(f"kvmon: {exc}", file=sys.stderr)
            return 2

    if args.command is not None:
        from importlib import import_module

        module, _, name = SUBCOMMANDS[args.command].partition(":")
        return int(getattr(import_module(module), name)(args))
    if args.print_path is not None:
        return _print_path(args.print_path)
    if args.install_desktop or args.uninstall_desktop:
        from kvmon.cli import desktop

        return desktop.run_install() if args.install_desktop else desktop.run_uninstall()
    if args.self_test:
        from kvmon.gui.selftest import run as run_self_test

        return run_self_test(args)
    from kvmon.gui.qtplatform import window_problem

    status = window_problem()  # no display, or Qt's platform plugin lacks system libraries: say which, exit 2
    if status is not None:
        return status
    from kvmon.gui.app import run as run_gui

    return run_gui(args)


if __name__ == "__main__":
    sys.exit(main())
