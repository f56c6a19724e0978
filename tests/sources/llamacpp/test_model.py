"""llama-server's model as its real /props and /v1/models answers say (build b11549's captures): the name, sizes and
type from /v1/models' meta, and, for a server on another machine, why its model file is not read."""

from __future__ import annotations

import json
from typing import Any

from repo_paths import FIXTURES

from kvmon.sources.llamacpp.model import ModelDescriber
from kvmon.sources.llamacpp.process import LlamaServerProcess

CAPTURES = FIXTURES / "llama-server"


def _answers(path: str, reasons: dict[str, str], key: str) -> Any:
    """What the captured server answered (the source's GET, with a failure as a reason)."""
    if path == "/v1/models":
        return json.loads((CAPTURES / "v1-models.idle.json").read_text())
    reasons[key] = f"{path} was not captured"
    return None


def test_the_model_from_the_servers_own_answers() -> None:
    props = json.loads((CAPTURES / "props.idle.json").read_text())
    describer = ModelDescriber(_answers, LlamaServerProcess("192.0.2.1", 8080), local_files=False)
    info, reasons = describer.info(props, None, None)
    assert (info.name, info.server_name) == ("tiny-llama-e256-l4.gguf", "tiny-llama-e256-l4.gguf")
    assert (info.n_params, info.weight_bytes, info.n_ctx_train, info.n_embd) == (2_666_752, 5_338_112, 32768, 256)
    assert info.quantization == "F16"
    assert info.shape is None  # the shape comes from the model file, which is not on this machine
    assert reasons["model.shape"] == ("model file 'tiny-llama-e256-l4.gguf' is on another machine (the server's): "
                                      "kvmon reads model files only of servers on this one")


def test_a_relative_model_path_is_the_servers_and_not_resolved_without_its_folder() -> None:
    describer = ModelDescriber(_answers, LlamaServerProcess("192.0.2.1", 8080), local_files=True)
    assert describer.resolve("/models/qwen3-8b.gguf") == "/models/qwen3-8b.gguf"
    assert describer.resolve("models/qwen3-8b.gguf") is None  # the remote server's folder is not known here
    assert describer.resolve(None) is None
