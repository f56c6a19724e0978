"""llama.cpp's own HTTP server (the ``xllamacpp`` wheel, in this process) behind a llama-server command line.

Run as ``python llama_server_child.py -m MODEL.gguf [llama-server flags]``: the flags below are turned into
``xllamacpp.CommonParams`` as llama-server's own argument parser would set them, so kvmon's command-line reader
sees a real llama-server command line on the listening process. Prints ``READY <url>`` once the model is loaded
(or ``FAILED <reason>`` and exits 1); the log goes to stderr. SIGTERM, or the parent's death, stops it.

Flags with no CommonParams field in this wheel are refused (the tests that need them say so and use the
captured log lines or the simulator instead).
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import os
import signal
import sys
import threading

STOP_GRACE_S = 1.5
FA = {"on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
      "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO"}


def build_parser() -> argparse.ArgumentParser:
    """The llama-server flags this test server understands, spelled as llama-server spells them."""
    p = argparse.ArgumentParser(prog="llama-server (xllamacpp)")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-c", "--ctx-size", type=int, default=0)
    p.add_argument("-np", "--parallel", type=int, default=-1)  # llama-server's default: auto
    p.add_argument("-kvu", "--kv-unified", action="store_true", default=None)
    p.add_argument("-no-kvu", "--no-kv-unified", dest="kv_unified", action="store_false")
    p.add_argument("-ctk", "--cache-type-k", default="f16")
    p.add_argument("-ctv", "--cache-type-v", default="f16")
    p.add_argument("-fa", "--flash-attn", choices=sorted(FA), default="auto")
    p.add_argument("-b", "--batch-size", type=int, default=2048)
    p.add_argument("-ub", "--ubatch-size", type=int, default=512)
    p.add_argument("--swa-full", action="store_true")
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)  # 0: any free port, printed on READY
    p.add_argument("--metrics", action="store_true")
    p.add_argument("--props", action="store_true")
    p.add_argument("--no-slots", action="store_true")
    p.add_argument("--api-key", action="append", default=[])
    p.add_argument("-lv", "--verbosity", type=int, default=3)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("-fit", "--fit", choices=("on", "off"), default="on")
    p.add_argument("-fitt", "--fit-target", default=None)  # MiB per device, one value broadcast
    p.add_argument("-cram", "--cache-ram", type=int, default=None)  # MiB; -1 no limit, 0 off
    p.add_argument("--sleep-idle-seconds", type=int, default=-1)
    p.add_argument("--spec-type", default="none")  # one type: none, draft-simple, ngram-simple, ...
    p.add_argument("-md", "--spec-draft-model", default=None)
    p.add_argument("--spec-draft-n-max", type=int, default=None)
    p.add_argument("-ctkd", "--spec-draft-type-k", default=None)  # the draft context's KV cache types
    p.add_argument("-ctvd", "--spec-draft-type-v", default=None)
    p.add_argument("--spec-synth-len", type=float, default=None)  # llama.cpp's synthetic acceptance (benchmarks)
    return p


def params_from_args(a: argparse.Namespace):  # type: ignore[no-untyped-def]  # xllamacpp has no stubs
    """CommonParams as llama-server's parser would fill them for these flags."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = a.model
    p.n_ctx = a.ctx_size
    p.n_parallel = a.parallel
    if a.kv_unified is not None:
        p.kv_unified = a.kv_unified
    p.cache_type_k = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{a.cache_type_k.upper()}")
    p.cache_type_v = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{a.cache_type_v.upper()}")
    p.flash_attn_type = getattr(xllamacpp.llama_flash_attn_type, FA[a.flash_attn])
    p.n_batch = a.batch_size
    p.n_ubatch = a.ubatch_size
    p.swa_full = a.swa_full
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    p.hostnames = [a.host]
    p.port = a.port
    p.endpoint_metrics = a.metrics
    p.endpoint_props = a.props
    p.endpoint_slots = not a.no_slots
    p.api_keys = list(a.api_key)
    p.verbosity = a.verbosity
    p.warmup = not a.no_warmup
    p.fit_params = a.fit == "on"
    if a.fit_target is not None:
        mib = [int(v) for v in a.fit_target.split(",")]
        targets = list(p.fit_params_target)
        p.fit_params_target = [mib[i if len(mib) > 1 else 0] * 1024 * 1024 if i < len(mib) or len(mib) == 1
                               else t for i, t in enumerate(targets)]
    if a.cache_ram is not None:
        p.cache_ram_mib = a.cache_ram
    p.sleep_idle_seconds = a.sleep_idle_seconds
    sp = p.speculative  # a copy: its fields are set, then it is given back (the draft's model path is shared)
    kind = a.spec_type.upper().replace("-", "_")
    sp.types = [getattr(xllamacpp.common_speculative_type, f"COMMON_SPECULATIVE_TYPE_{kind}")]
    if a.spec_draft_model is not None:
        sp.draft.mparams.path = a.spec_draft_model
    if a.spec_draft_n_max is not None:
        sp.draft.n_max = a.spec_draft_n_max
    if a.spec_draft_type_k is not None:
        sp.draft.cache_type_k = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{a.spec_draft_type_k.upper()}")
    if a.spec_draft_type_v is not None:
        sp.draft.cache_type_v = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{a.spec_draft_type_v.upper()}")
    if a.spec_synth_len is not None:
        sp.synth_len = a.spec_synth_len
    p.speculative = sp
    return p


def _die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the test process goes away, so no server outlives its test."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    _die_with_parent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    import xllamacpp

    try:
        server = xllamacpp.Server(params_from_args(args))
    except Exception as e:  # the wheel raises RuntimeError with "check the input params"; the log says why
        print(f"FAILED {e}", flush=True)
        return 1
    print(f"READY {server.listening_address}", flush=True)
    stop.wait()
    # a clean stop runs the server's own destructor, which can wait forever for its loop (asked to stop just as
    # the loop starts, or with a request in flight) while holding the interpreter; faulthandler's watchdog is a
    # C thread that ends the process after a while regardless
    with open(os.devnull, "w") as devnull:
        faulthandler.dump_traceback_later(STOP_GRACE_S, exit=True, file=devnull)
        del server
        sys.stderr.flush()
        os._exit(0)  # no interpreter teardown while the wheel's threads may still run


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
