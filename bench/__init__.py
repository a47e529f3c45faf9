"""The code the benchmarks (scripts/) and the tests (tests/) share, so that neither imports the other: synthetic
pages (pages), the benchmarks' report arithmetic (report), their command-line and worker plumbing and checkpoint cache
(run), the batch and serve benchmarks' options, worker and server command lines and saved records (commands), the
random-weight real-size checkpoints (real_size), PP-DocLayout's labels, settings and reference pixels (layout), the
transformers references (references), and the hub chat templates, tiny tokenizers and their special tokens the
checkpoints need (paddle_tokens, tiny_tokenizer, hunyuan_tokens, deepseek_tokens, tiny_bpe). It imports ms_ocr, never
scripts/ or tests/ (nor runs code that does); torch, transformers and the tokenizer trainers only inside functions."""
