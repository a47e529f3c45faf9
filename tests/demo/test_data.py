"""The demo model's data: renderer, text generator and tokenizer are deterministic for a seed, the tokenizer
carries PaddleOCR-VL's special tokens and reproduces the hub chat template, and examples/ is what the script makes."""

import os
import random
import re

import numpy as np
import pytest

from training.demo import data as demo_data
from tests.helpers.fonts import needs_fonts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = needs_fonts


def _pixels(items):
    return [np.asarray(img) for img, _ in items]


def test_held_out_set_is_deterministic():
    a, b = demo_data.held_out(11, 6), demo_data.held_out(11, 6)
    assert [t for _, t in a] == [t for _, t in b]
    assert all(np.array_equal(x, y) for x, y in zip(_pixels(a), _pixels(b)))
    c = demo_data.held_out(12, 6)
    assert [t for _, t in a] != [t for _, t in c]


def test_lines_cover_the_text_distribution():
    lines = demo_data.corpus(3, 400)
    assert max(map(len, lines)) <= demo_data.MAX_CHARS and min(map(len, lines)) >= 1
    text = "".join(lines)
    for chars in ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", ".,:;!?", "$%#-/()"):
        assert set(chars) <= set(text), set(chars) - set(text)
    assert any(w.isupper() and len(w) > 1 for line in lines for w in line.split())
    # letters right after digits (221B, Room 4B, NW1 6XE) in at least 1 % of the lines
    assert sum(bool(re.search(r"\d[A-Z]", line)) for line in lines) >= 4


def test_rendered_line_sizes():
    rng = random.Random(5)
    for img, text in (demo_data.sample(rng) for _ in range(20)):
        assert img.mode == "RGB" and demo_data.LINE_HEIGHT[0] <= img.height <= demo_data.LINE_HEIGHT[1]
        assert np.asarray(img).std() > 5, text  # ink on paper, not a blank canvas


def test_character_centres_follow_the_glyphs_and_leave_the_image_unchanged():
    font = demo_data.font_path("DejaVuSansMono.ttf")
    plain = demo_data.render_line("ab 12.5", font, random.Random(3))
    img, xs = demo_data.render_line("ab 12.5", font, random.Random(3), centres=True)
    assert np.array_equal(np.asarray(plain), np.asarray(img))  # same draws from the seed
    assert len(xs) == 7 and all(0 < a < b < img.width for a, b in zip(xs, xs[1:]))
    pitch = np.diff(xs)  # a monospace font: one advance per character, within the augmentation's rounding
    assert pitch.max() - pitch.min() < 1e-6 and 6 < pitch[0] < 20
    clean, xs = demo_data.render_line("W", font, random.Random(0), augment=False, centres=True)
    ink = np.nonzero((np.asarray(clean)[..., 0] < 128).any(axis=0))[0]
    assert abs((ink.min() + ink.max()) / 2 - xs[0]) <= 1.5


def _blank_right(img):
    """Columns right of the last one holding ink (a pixel darker than halfway between ink and paper)."""
    grey = np.asarray(img)[..., 0].astype(np.float32)
    paper, ink = np.median(grey), grey.min()
    cols = np.nonzero((grey < (paper + ink) / 2).any(axis=0))[0]
    return img.width - 1 - cols.max()


def test_margin_adds_blank_paper_on_the_right_only_when_asked():
    font = demo_data.font_path("DejaVuSerif.ttf")
    text = "Total 12.50 due"
    for seed in range(4):  # margin=0 draws nothing more from the seed: older sets keep their pixels
        a = demo_data.render_line(text, font, random.Random(seed), centres=True)
        b = demo_data.render_line(text, font, random.Random(seed), centres=True, margin=0.0)
        assert np.array_equal(np.asarray(a[0]), np.asarray(b[0])) and a[1] == b[1]
    plain = [_blank_right(demo_data.render_line(text, font, random.Random(s))) for s in range(30)]
    wide = [demo_data.render_line(text, font, random.Random(s), centres=True, margin=1.0) for s in range(30)]
    blank = [_blank_right(img) for img, _ in wide]
    assert max(plain) <= 14  # the renderer's own 2-10 px pad (plus blur and rotation)
    assert min(blank) >= 1 and max(blank) <= demo_data.MARGIN_PX + 14
    assert np.mean(blank) > 60 and len(set(blank)) > 20  # spread over 1..MARGIN_PX
    for img, xs in wide:  # the character centres stay on the glyphs, left of the margin
        assert xs[-1] < img.width - _blank_right(img)
    rng = random.Random(9)
    share = np.mean([_blank_right(demo_data.sample(rng, margin=0.5)[0]) > 14 for _ in range(400)])
    assert 0.4 < share < 0.6  # about half the lines (a few margins are narrower than the renderer's own pad)


def test_unseen_fonts_are_not_training_fonts():
    assert demo_data.UNSEEN_FONT == demo_data.UNSEEN_FONTS[0] and len(set(demo_data.UNSEEN_FONTS)) == 2
    assert not set(demo_data.UNSEEN_FONTS) & set(demo_data.TRAIN_FONTS)
    for name in demo_data.TRAIN_FONTS + demo_data.UNSEEN_FONTS:
        assert os.path.isfile(demo_data.font_path(name))


def _kinds(seed, count):
    rng = random.Random(seed)
    return [demo_data.sample_crop(rng) for _ in range(count)]


def test_crops_are_deterministic_and_their_centres_follow_the_text():
    a, b = _kinds(21, 12), _kinds(21, 12)
    assert [t for _, t, _ in a] == [t for _, t, _ in b]
    assert all(np.array_equal(np.asarray(x[0]), np.asarray(y[0])) for x, y in zip(a, b))
    for img, text, centres in a:
        assert img.mode == "RGB" and len(centres) == len(text)
        for ch, c in zip(text, centres):
            assert (c is None) == (ch == "\n")
            if c is not None:  # inside the crop
                assert 0 < c[0] < img.width and 0 < c[1] < img.height, (text, c, img.size)


def test_crop_kinds_cover_the_geometry_users_bring():
    rng = random.Random(5)
    lines = [demo_data.sample_crop(rng, kind="line", max_area=None) for _ in range(300)]  # at users' sizes
    heights = np.array([img.height for img, _, _ in lines])
    assert heights.min() >= demo_data.CROP_HEIGHT[0] - 1 and heights.max() <= demo_data.CROP_HEIGHT[1] + 1
    assert (heights <= 40).mean() > 0.2 and (heights > 100).mean() > 0.2  # log-uniform: every band drawn
    # for training, the same draws at most CROP_MAX_AREA pixels (the processor would downscale them anyway)
    fitted = [demo_data.sample_crop(rng, kind="line") for _ in range(100)]
    assert all(img.width * img.height <= demo_data.CROP_MAX_AREA * 1.05 for img, _, _ in fitted)
    assert all("\n" not in text for _, text, _ in lines)
    # paper above and below the text: the first and last rows of most tall crops hold no ink
    tall = [np.asarray(img.convert("L"), np.float32) for img, _, _ in lines if img.height > 100]
    blank = [abs(a[0].mean() - np.median(a)) < 20 and abs(a[-1].mean() - np.median(a)) < 20 for a in tall]
    assert np.mean(blank) > 0.8
    blocks = [demo_data.sample_crop(rng, kind="block") for _ in range(60)]
    counts = [text.count("\n") + 1 for _, text, _ in blocks]
    assert set(counts) == set(range(demo_data.BLOCK_LINES[0], demo_data.BLOCK_LINES[1] + 1))
    for img, text, centres in blocks:  # reading order: each line's characters below the previous line's
        rows = [[c[1] for c in centres[i:j] if c] for i, j in _line_spans(text)]
        assert all(max(a) < min(b) for a, b in zip(rows, rows[1:]))
    screens = [demo_data.sample_crop(rng, kind="screen") for _ in range(60)]
    assert all(img.height <= 40 + 24 for img, _, _ in screens)
    arrays = [np.asarray(img) for img, _, _ in screens]
    assert np.mean([(a[..., 0] != a[..., 2]).any() for a in arrays]) > 0.3  # coloured text or paper
    rng = random.Random(6)
    drawn = [demo_data.sample_crop(rng)[1] for _ in range(400)]
    share = np.mean(["\n" in t for t in drawn])
    assert abs(share - dict(demo_data.CROP_KINDS)["block"]) < 0.07


def _line_spans(text):
    start = 0
    for i, ch in enumerate(text + "\n"):
        if ch == "\n":
            yield start, i
            start = i + 1


def test_crop_centres_sit_on_the_glyphs():
    font = demo_data.font_path("DejaVuSansMono.ttf")
    img, centres = demo_data.render_crop(["W", "  W"], font, random.Random(0), 30, (7, 5, 9, 11), pitch=1.4,
                                         screen=True)
    grey = np.asarray(img.convert("L"), np.float32)
    ink = grey < grey.max() - 100
    for c in (centres[0], centres[4]):  # the two W's; centres[1] is the newline
        ys, xs = np.nonzero(ink[int(c[1]) - 8:int(c[1]) + 8])
        assert abs((xs.min() + xs.max()) / 2 - c[0]) <= 1.5
    assert centres[1] is None and centres[4][1] - centres[0][1] == round(sum(demo_data._font(font, 30).getmetrics())
                                                                         * 1.4)


def test_examples_folder_is_reproducible(tmp_path):
    made = demo_data.make_examples(str(tmp_path))
    assert [os.path.basename(p) for p in made] == [name for name, _, _ in demo_data.EXAMPLES]
    for path in made:
        committed = os.path.join(ROOT, "examples", os.path.basename(path))
        assert np.array_equal(np.asarray(demo_data.Image.open(path)), np.asarray(demo_data.Image.open(committed)))
        assert os.path.getsize(committed) < 20_000


def test_tokenizer_is_deterministic_with_the_real_special_tokens():
    pytest.importorskip("transformers")
    from training.demo import tokenizer as demo_tokenizer

    a, b = demo_tokenizer.train_tokenizer(lines=3000), demo_tokenizer.train_tokenizer(lines=3000)
    assert a.to_str() == b.to_str()
    assert a.get_vocab_size() == demo_tokenizer.VOCAB_SIZE
    for token, idx in (("<unk>", 0), ("<s>", 1), ("</s>", 2), ("<|begin_of_sentence|>", 3),
                       ("<|IMAGE_PLACEHOLDER|>", 5), ("<|IMAGE_START|>", 6), ("<|IMAGE_END|>", 7)):
        assert a.token_to_id(token) == idx
    for text in demo_data.corpus(99, 50) + ["Ünïcödé 東京 €5"]:
        assert a.decode(a.encode(text).ids) == text  # byte-level: any text round-trips


def test_saved_tokenizer_renders_the_hub_template_like_the_script(tmp_path):
    """ms_ocr's processor (chat template + tokenizer from the saved files) gives the ids the training used."""
    pytest.importorskip("transformers")
    from ms_ocr.processing.chat import load_chat_template, render_chat
    from ms_ocr.processing.tokenizer import Tokenizer
    from training.demo import tokenizer as demo_tokenizer

    tok = demo_tokenizer.train_tokenizer(lines=3000)
    demo_tokenizer.write_tokenizer(tok, str(tmp_path))
    saved = Tokenizer.from_dir(str(tmp_path))
    template = load_chat_template(str(tmp_path))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": demo_tokenizer.PROMPT}]}]
    rendered = render_chat(template, messages, add_generation_prompt=True, **saved.special_tokens)
    assert rendered == demo_tokenizer.prompt_text(1)
    expected = demo_tokenizer.prompt_text(3)
    assert saved.encode(expected, add_special_tokens=False) == tok.encode(expected).ids
    assert saved.eos_token_id == 2


def test_tokenizer_spends_one_token_on_each_template_word():
    """The chat template around the image costs 12 tokens (22 when its words were spelt in characters): the
    decoder's sequences are ~15 % shorter, the training step cheaper."""
    pytest.importorskip("transformers")
    from training.demo import tokenizer as demo_tokenizer

    tok = demo_tokenizer.train_tokenizer(lines=3000)
    pieces = [tok.id_to_token(i) for i in tok.encode(demo_tokenizer.prompt_text(5)).ids]
    assert len(pieces) == 5 + 12, pieces
    assert [p for p in pieces if p.isalpha() and len(p) > 1] == ["User", "OCR", "Assistant"], pieces
