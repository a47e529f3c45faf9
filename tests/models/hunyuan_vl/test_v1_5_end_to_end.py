"""A HunyuanOCR-1.5-layout checkpoint end to end: with nothing asked, Tencent's default task, system turn and decoding
give transformers' generate tokens given what Tencent's transformers client gives it (infer_hf_8gpu.py: an empty
system message, greedy, repetition_penalty 1.08); each default overridden; the server applies the same defaults to a
request that names none; --max-pixels."""

from PIL import Image

from ms_ocr import models
from tests.cli_util import assert_one_line_error, run_module
from tests.helpers.tiny_hunyuan import infer_json, reference_greedy
from tests.models.hunyuan_vl import tencent_tasks as T

NEW_TOKENS = 12


def cli(folder, page, *extra):
    return infer_json(folder, page, NEW_TOKENS, *extra)


def test_defaults_are_tencents_and_each_can_be_overridden(hy15_dir, page):
    image = [Image.open(page).convert("RGB")]
    want = reference_greedy(hy15_dir, image, T.TASK_PROMPTS[T.DEFAULT_TASK], NEW_TOKENS, system="",
                            repetition_penalty=T.REPETITION_PENALTY)
    plain = reference_greedy(hy15_dir, image, T.TASK_PROMPTS[T.DEFAULT_TASK], NEW_TOKENS, system="")
    assert want != plain  # the penalty changes this checkpoint's tokens: the comparison sees it
    (got,), _ = cli(hy15_dir, page)
    assert got["token_ids"] == want
    (got,), _ = cli(hy15_dir, page, "--repetition-penalty", "1", "--no-early-stop", "--clean-up-from", "0",
                    "--no-doc-postprocess")
    assert got["token_ids"] == plain
    assert got["text"] == models.get("hunyuan-ocr").host_side(hy15_dir)["processor"].decode(plain)


def test_spotting_json_boxes_and_visualize(hy15_dir, page, tmp_path):
    drawing = tmp_path / "boxes.png"
    (got,), stderr = cli(hy15_dir, page, "--task", "spotting_json", "--visualize", str(drawing))
    assert got["boxes"] == []  # random weights write no JSON: the answer is kept, with one note
    assert stderr.count("note:") == 1 and "spotting_json answer" in stderr
    assert Image.open(drawing).size == (120, 160)


def test_flags_that_do_not_apply_are_one_line_errors(hunyuan_checkpoint, hy15_dir, page):
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", hunyuan_checkpoint(), "--image", page,
                      "--no-doc-postprocess")
    assert_one_line_error(proc, "--no-doc-postprocess applies to hunyuan-ocr 1.5", "not hunyuan-ocr 1.0")
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", hy15_dir, "--image", page,
                      "--task", "parse")
    assert_one_line_error(proc, "unknown task 'parse'", "doc_parse")
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", hy15_dir, "--image", page,
                      "--max-pixels", "10000000")
    assert_one_line_error(proc, "--max-pixels must be in 1024..49152")


def test_max_pixels_caps_the_page(hy15_dir, page):
    """120x160 fits the tiny checkpoint's 49,152 pixels: 160x128, a 5x4 merged grid, 5 * (4 + 1) + 2 = 27 image
    tokens; capped at 4,096 pixels it is resized to 64x32: 2 * (1 + 1) + 2 = 6."""
    (full,), _ = cli(hy15_dir, page, "--max-new-tokens", "1")
    (capped,), _ = cli(hy15_dir, page, "--max-new-tokens", "1", "--max-pixels", "4096")
    assert full["timings"]["prompt_tokens"] - capped["timings"]["prompt_tokens"] == 27 - 6


def test_server_requests_get_the_defaults_unless_they_name_their_own():
    from ms_ocr.serve.app import sampling_for
    from ms_ocr.serve.protocol import parse_chat_request
    spec = dict(models.get("hunyuan-ocr").all_versions())
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": T.TASK_PROMPTS["doc_parse"]}]
    plain = parse_chat_request({"messages": messages})
    own = parse_chat_request({"messages": messages, "repetition_penalty": 1.0, "early_stop": False})
    s = sampling_for(plain, 16, spec["1.5"])
    assert (s.repetition_penalty, s.stop_rules, s.temperature) == (1.08, spec["1.5"].stop_rules, 0.0)
    s = sampling_for(own, 16, spec["1.5"])
    assert (s.repetition_penalty, s.stop_rules) == (1.0, ())
    s = sampling_for(plain, 16, spec["1.0"])
    assert (s.repetition_penalty, s.stop_rules) == (1.0, ())


def test_a_1_5_server_answers_as_infer_does(hy15_dir, page, graph_mode):
    """Tencent's vLLM client's request (an empty system message, the image, the doc_parse prompt, no penalty named)
    gets the tokens of the 1.5 defaults; the same request naming repetition_penalty 1 gets plain greedy ones."""
    from openai import OpenAI  # noqa: F401 - the serve tests' client

    from ms_ocr.generate import model_sampling
    from ms_ocr.runtime import Buckets
    from tests.serve.live import LiveServer, png_url
    spec = models.get("hunyuan-ocr")
    pipe = spec.load(hy15_dir, "CPU", "auto", Buckets(prefill=32, slots=64))
    img = Image.open(page).convert("RGB")
    defaults = pipe.run([img], T.TASK_PROMPTS["doc_parse"], model_sampling(pipe.spec, None, NEW_TOKENS),
                        task="doc_parse")
    plain = pipe.run([img], T.TASK_PROMPTS["doc_parse"], model_sampling(pipe.spec, None, NEW_TOKENS,
                                                                         repetition_penalty=1.0), task="doc_parse")
    server = LiveServer(pipe, "hunyuan-ocr", "--no-warmup")
    try:
        client = server.client()
        messages = [{"role": "system", "content": ""},
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_url(img)}},
                                                 {"type": "text", "text": T.TASK_PROMPTS["doc_parse"]}]}]
        got = client.chat.completions.create(model="hunyuan-ocr", messages=messages, max_tokens=NEW_TOKENS,
                                             temperature=0.0)
        assert got.choices[0].message.content == defaults["text"]
        assert got.usage.completion_tokens == len(defaults["token_ids"])
        got = client.chat.completions.create(model="hunyuan-ocr", messages=messages, max_tokens=NEW_TOKENS,
                                             temperature=0.0, extra_body={"repetition_penalty": 1.0})
        assert got.choices[0].message.content == plain["text"]
        assert defaults["token_ids"] != plain["token_ids"]
    finally:
        server.close()
