"""OpenAI-compatible chat-completions server over the continuous-batching engine (python -m ms_ocr.serve)."""
