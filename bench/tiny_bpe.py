"""A byte-level BPE tokenizer.json trained here, with a model's special tokens appended as added tokens (the tiny and
real-size HunyuanOCR and DeepSeek-OCR test checkpoints' tokenizer)."""

import random

WORDS = ("the of and to in is text page table formula chart title line word number value document markdown "
         "Convert Free OCR figure image 提取 图中 文字 图片 检测 识别 坐标 格式化 输出 表格 解析 公式 文档 html latex "
         "HTML LaTeX").split()


def corpus(seed):
    rng = random.Random(seed)
    lines = ["ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,:;!?()[]{}<>-_=+*/'\"#$%&@|"]
    for _ in range(2000):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10)))
                     + rng.choice(["。", "，", ".", f"({rng.randint(0, 999)},{rng.randint(0, 999)})"]))
    return lines


def write_bpe_tokenizer(path, vocab, specials, seed, bos=None):
    """tokenizer.json: `vocab` BPE entries, then `specials` as added special tokens; with `bos`, a template
    post-processor prepends it (as DeepSeek's tokenizer adds <｜begin▁of▁sentence｜>)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer)
    if tok.get_vocab_size() != vocab:
        raise RuntimeError(f"BPE vocabulary has {tok.get_vocab_size()} entries, expected {vocab}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(path)
