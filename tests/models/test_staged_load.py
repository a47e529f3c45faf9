"""Loading in two stages (models/loading.staged_weights, what `infer` does for one request): the vision side's
weights first, the text side's once the images are encoded, in place of the released vision weights. The
answer is the one-stage load's, token for token and logit for logit."""

import numpy as np
import pytest

from ms_ocr.generate import SamplingConfig
from bench.pages import text_page


@pytest.mark.parametrize("model", ["paddleocr-vl", "hunyuan-ocr"])
def test_staged_load_answers_as_the_whole_load(model, tiny_checkpoint, hunyuan_checkpoint, graph_mode):
    from ms_ocr.engine import BatchEngine
    from ms_ocr.models import get as model_spec
    from ms_ocr.models.loading import staged_weights, text_parameter_names
    from ms_ocr.runtime import Buckets
    folder = tiny_checkpoint(dtype="bfloat16") if model == "paddleocr-vl" else hunyuan_checkpoint(dtype="bfloat16")
    package = model_spec(model)
    prompt = next(iter(package.tasks.values()))
    cfg = SamplingConfig(max_new_tokens=6)
    whole = package.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    want_logits = []
    want = whole.run([text_page(96, 128, "staged")], prompt, cfg, on_logits=want_logits.append)

    with staged_weights():
        staged = package.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    net = staged.runtime.model
    text = text_parameter_names(net)
    import mindspore as ms
    probe = net.model.embed_tokens.weight  # bf16 once loaded (the checkpoint's bf16 stays bf16 on the CPU)
    assert probe.name in text and probe.dtype == ms.float32  # not loaded yet
    vision = [p for p in net.get_parameters() if p.name not in text and not p.name.endswith("_cache")]
    # each ViT layer's weights are read as the layer is about to run (not at load) and freed as soon as it has
    # run, before the vision head and the text load
    layers = [p for layer in net.vision_layers() for p in layer.get_parameters()]
    assert layers and all(p.dtype == ms.float32 for p in layers)  # not loaded yet (bf16 once loaded)
    names = {p.name for p in layers}
    assert all(np.abs(p.asnumpy()).max() > 0 for p in vision if p.name not in names and "weight" in p.name)  # loaded
    read = []
    load_layer = staged.runtime.vision._load_layer
    staged.runtime.vision._load_layer = lambda names: (read.append(sorted(names)), load_layer(names))
    at_text_load = {}
    load_text = staged.ensure_text_weights

    def ensure_text_weights(**kwargs):
        at_text_load["layers"] = [int(np.prod(p.shape)) for p in layers]
        return load_text(**kwargs)

    staged.ensure_text_weights = ensure_text_weights
    got_logits = []
    got = staged.run([text_page(96, 128, "staged")], prompt, cfg, on_logits=got_logits.append,
                     release_vision=True)  # as infer runs it
    assert got["token_ids"] == want["token_ids"] and got["text"] == want["text"]
    np.testing.assert_array_equal(np.stack(got_logits), np.stack(want_logits))
    assert all(int(np.prod(p.shape)) == 0 for p in vision)  # released
    assert at_text_load["layers"] == [0] * len(layers)
    assert read == [sorted(p.name for p in layer.get_parameters()) for layer in net.vision_layers()]
    assert not staged.runtime.vision.release_layers  # only during that one request's vision
    # and their memory with them: no graph-input view (nn.blocks.graph_input) keeps an old buffer alive (one did:
    # the text weights then took new memory beside the unreleased vision weights, +0.25 GB at real size)
    assert not [p.name for p in vision if getattr(p, "_ms_ocr_view", None) is not None]
    assert probe.dtype == ms.bfloat16
    assert "text_load" in got["timings"]["rss_gb"]

    if model != "paddleocr-vl":
        return
    # a staged pipeline handed to the engine (batch, server) loads its text weights at once, vision kept
    with staged_weights():
        again = package.load(folder, "CPU", "auto", Buckets(prefill=32, slots=64))
    BatchEngine(again, cfg, max_batch_size=1, max_input_length=256, max_output_length=8)
    assert again.runtime.model.model.embed_tokens.weight.dtype == ms.bfloat16
    assert all(int(np.prod(p.shape)) > 0 for p in again.runtime.model.get_parameters())
    # its ViT layers are read as they first run and kept: two requests answer as the one-stage load
    for _ in range(2):
        assert again.run([text_page(96, 128, "staged")], prompt, cfg)["token_ids"] == want["token_ids"]
        assert all(p.dtype == ms.bfloat16 for layer in again.runtime.model.vision_layers()
                   for p in layer.get_parameters())
