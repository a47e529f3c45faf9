"""A sentencepiece `tokenizer.model` encoded the way transformers' TokenizersBackend converts and runs it.

transformers (5.25, `SpmConverter.build_tokenizer_from_spm_proto`) turns a bare `tokenizer.model` into a
`tokenizers` BPE/Unigram that follows the model's own normaliser spec (precompiled character map, extra-space
removal, `" " -> "▁"`, dummy prefix), so each span between added tokens encodes as `SentencePieceProcessor.encode`
encodes it. `legacy` (tokenizer_config.json, default true) gives every span its dummy prefix; otherwise only a span
at the start of the text gets one, and not when it starts with a space or normalising removed its first character.
Added tokens are matched on the raw text first (we split on them ourselves); user-defined pieces stay
sentencepiece's, emitted whole. Decoding mirrors its `Replace("▁", " ") -> ByteFallback -> Fuse -> Strip(one
leading space, with a dummy prefix)` decoder.
"""

import re

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

_CONTROL = 3  # ModelProto.SentencePiece.Type
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _load_proto(path):
    proto = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


class SentencePieceBackend:
    """Pieces from sentencepiece, added tokens matched before it (leftmost, longest first)."""

    def __init__(self, path, legacy=True):
        proto = _load_proto(path)
        self._dummy_prefix = proto.normalizer_spec.add_dummy_prefix
        self._legacy = bool(legacy)
        self._sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        proto.normalizer_spec.add_dummy_prefix = False  # the same normaliser without the prefix
        self._sp_bare = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        self._added = {}  # content -> id
        self._added_by_id = {}
        self._special = set()
        # Control pieces (<s>, </s>) become special added tokens; user-defined pieces are left to sentencepiece
        self.proto_added = [p.piece for p in proto.pieces if p.type == _CONTROL]
        for piece in self.proto_added:
            self.add_token(piece, True, self._sp.piece_to_id(piece))
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
                ids.extend(self._encode_span(text[start:match.start()], start == 0))
            ids.append(self._added[match.group()])
            start = match.end()
        if start < len(text):
            ids.extend(self._encode_span(text[start:], start == 0))
        return ids

    def _encode_span(self, span, first):
        if not self._dummy_prefix or self._legacy:
            return self._sp.encode(span)
        # Metaspace(prepend_scheme="first") prefixes a span whose normalised text starts at offset 0 of the text
        # and not with "▁": so not when normalising dropped its first character (leading spaces removed)
        bare = self._sp_bare.normalize(span)
        if first and bare and not bare.startswith("▁") and bare != self._sp_bare.normalize(span[1:]):
            return self._sp.encode(span)
        return self._sp_bare.encode(span)

    def decode(self, ids, skip_special_tokens):
        tokens = [self.id_to_token(int(i)) for i in ids]
        tokens = [t for t in tokens if t is not None and not (skip_special_tokens and t in self._special)]
        text = "".join(_byte_fallback([t.replace("▁", " ") for t in tokens]))
        return text[1:] if self._dummy_prefix and text.startswith(" ") else text


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
