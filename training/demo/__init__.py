"""The embedded demo checkpoint's training: data (rendered lines), tokenizer, model and export, the loop."""
