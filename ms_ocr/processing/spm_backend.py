"""A sentencepiece `tokenizer.model` encoded the way transformers' TokenizersBackend converts and runs it.

transformers (5.x) turns a bare `tokenizer.model` into a `tokenizers` BPE/Unigram over the same pieces with
the model's precompiled character map, `" " -> "▁"`, no dummy-prefix space and no whitespace collapsing, then
splits the text on added tokens first. We load the same proto with those normaliser settings and split on the
added tokens ourselves; decoding mirrors its `Replace("▁", " ") -> ByteFallback -> Fuse` decoder.
"""

import re

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

_CONTROL, _USER_DEFINED = 3, 4  # ModelProto.SentencePiece.Type
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _load_proto(path):
    proto = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


class SentencePieceBackend:
    """Pieces from sentencepiece, added tokens matched before it (leftmost, longest first)."""

    def __init__(self, path):
        proto = _load_proto(path)
        # The converted tokenizer prepends no "▁" and keeps runs of spaces; the char map still applies.
        proto.normalizer_spec.add_dummy_prefix = False
        proto.normalizer_spec.remove_extra_whitespaces = False
        self._sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        self._added = {}  # content -> id
        self._added_by_id = {}
        self._special = set()
        # Control pieces (<s>, </s>) become special added tokens and user-defined pieces plain ones.
        self.proto_added = [(p.piece, p.type == _CONTROL) for p in proto.pieces if p.type in (_CONTROL, _USER_DEFINED)]
        for piece, special in self.proto_added:
            self.add_token(piece, special, self._sp.piece_to_id(piece))
        self._pattern = None

    def __len__(self):
        return max([self._sp.get_piece_size() - 1, *self._added.values()]) + 1

    def add_token(self, content, special, token_id=None):
        """Register an added token (new ones get the next free id, as transformers' add_tokens does)."""
        if content not in self._added:
            known = self.token_to_id(content)
            self._added[content] = token_id if token_id is not None else known if known is not None else len(self)
            self._added_by_id[self._added[content]] = content
        if special:
            self._special.add(content)
        self._pattern = None

    def token_to_id(self, token):
        if token in self._added:
            return self._added[token]
        token_id = self._sp.piece_to_id(token)
        return token_id if self._sp.id_to_piece(token_id) == token else None

    def id_to_token(self, token_id):
        if token_id in self._added_by_id:
            return self._added_by_id[token_id]
        return self._sp.id_to_piece(token_id) if 0 <= token_id < self._sp.get_piece_size() else None

    def _splitter(self):
        if self._pattern is None:
            tokens = sorted(self._added, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, tokens))) if tokens else None
        return self._pattern

    def encode(self, text, post_process=False):
        """Ids of `text` (no post-processor exists to add BOS/EOS): added tokens as themselves, the spans
        between them through sentencepiece."""
        ids, start = [], 0
        pattern = self._splitter()
        for match in pattern.finditer(text) if pattern else ():
            if match.start() > start:
                ids.extend(self._sp.encode(text[start:match.start()]))
            ids.append(self._added[match.group()])
            start = match.end()
        if start < len(text):
            ids.extend(self._sp.encode(text[start:]))
        return ids

    def decode(self, ids, skip_special_tokens):
        tokens = [self.id_to_token(int(i)) for i in ids]
        tokens = [t for t in tokens if t is not None and not (skip_special_tokens and t in self._special)]
        return "".join(_byte_fallback([t.replace("▁", " ") for t in tokens]))


def _byte_fallback(tokens):
    """tokenizers' ByteFallback decoder: runs of <0xNN> pieces become their UTF-8 text, or one U+FFFD per byte."""
    out, pending = [], bytearray()

    def flush():
        if pending:
            try:
                out.append(pending.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" * len(pending))
            pending.clear()

    for token in tokens:
        match = _BYTE_PIECE.match(token)
        if match:
            pending.append(int(match.group(1), 16))
        else:
            flush()
            out.append(token)
    flush()
    return out
