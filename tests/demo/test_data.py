"""The demo model's data: renderer, text generator and tokenizer are deterministic for a seed, the tokenizer
carries PaddleOCR-VL's special tokens and reproduces the hub chat template, and examples/ is what the script makes."""

import os
import random

import numpy as np
import pytest

from training.demo import data as demo_data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(bool(demo_data.missing_fonts()), reason=f"fonts missing: {demo_data.missing_fonts()}; "
                                f"apt-get install {demo_data.FONT_PACKAGES}")


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


def test_unseen_font_is_not_a_training_font():
    assert demo_data.UNSEEN_FONT not in demo_data.TRAIN_FONTS
    for name in demo_data.TRAIN_FONTS + (demo_data.UNSEEN_FONT,):
        assert os.path.isfile(demo_data.font_path(name))


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
