"""Incremental detokenisation: the text of a growing token sequence, as far as no later token can change it. One
implementation for every stream (`infer --stream`, the server's streamed answers)."""


class TextStream:
    """Incremental detokenisation (vLLM's prefix/read offsets: the new text is what decoding from a few tokens
    back adds, so leading-space rules and multi-token characters come out right) plus stop strings.

    exact=True (`infer --stream`, whose printed text must be the final answer's, byte for byte): the whole
    sequence is decoded at each token and only a text that extends what was taken so far is taken, so invalid byte
    sequences (U+FFFD) come out as the whole-answer decode writes them; O(n^2) decoding, fine for one answer."""

    def __init__(self, tokenizer, skip_special_tokens, eos_ids, stops=(), exact=False):
        self.tok, self.skip, self.eos, self.stops = tokenizer, skip_special_tokens, set(eos_ids), list(stops)
        self.exact = exact
        self.ids, self.prefix, self.read = [], 0, 0
        self.text, self.sent, self.stopped = "", 0, False
        self.hold = max((len(s) for s in self.stops), default=1) - 1

    def add(self, token):
        """Feed a token; True once a stop string appeared (the text is cut before it)."""
        if token in self.eos:
            return False
        self.ids.append(token)
        if self._byte_token(token):
            # a run of byte-fallback tokens decodes as a whole: a valid byte (say "f") becomes U+FFFD when the
            # next byte makes the run invalid UTF-8, so nothing of it is taken until a token that is not a byte
            return False
        start = max(0, len(self.text) - self.hold)
        if self.exact:
            whole = self.tok.decode(self.ids, self.skip)
            if whole.endswith("\ufffd") or not whole.startswith(self.text) or len(whole) == len(self.text):
                return False
            self.text = whole
        else:
            before = self.tok.decode(self.ids[self.prefix:self.read], self.skip)
            after = self.tok.decode(self.ids[self.prefix:], self.skip)
            if len(after) <= len(before) or after.endswith("\ufffd"):
                return False
            self.text += after[len(before):]
            self.prefix, self.read = self.read, len(self.ids)
        for s in self.stops:
            at = self.text.find(s, start)
            if at >= 0:
                self.text, self.stopped = self.text[:at], True
        return self.stopped

    def _byte_token(self, token):
        piece = self.tok.id_to_token(token)
        return isinstance(piece, str) and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")

    def final_text(self):
        """The whole answer: the tokens decoded at once (as `infer` does), or the text cut at a stop string."""
        return self.text if self.stopped else self.tok.decode(self.ids, self.skip)

    def pending(self, final=False):
        """Text not yet sent; while running, the last characters that could start a stop string stay back."""
        text = self.final_text() if final else self.text
        end = len(text) if final or not self.stops else max(self.sent, len(text) - self.hold)
        if final and not text.startswith(self.text[:self.sent]):
            end = self.sent  # the whole-answer decode differs from what was streamed: nothing to add
        out, self.sent = text[self.sent:end], max(self.sent, end)
        return out
