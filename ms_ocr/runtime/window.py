"""The KV-cache slots of a decoder with a reference sliding window (Unlimited-OCR; nn/decoder.py): a query at
position q sees key k iff k <= q and (k < P or q - k < W), P the sequence's prompt length (the first forward's,
each sequence its own) and W the window. So a sequence's cache holds its P prompt slots and then a ring of W slots
for the answer: the answer's j-th token (position P + j) goes to slot P + j % W. Memory does not grow with the
answer. Positions stay absolute (rope is applied before caching), so a slot's order in the ring does not matter.

Host side only (NumPy): the runtime asks, for each decode step, where each sequence's token is written and the
position each slot holds (the decoder masks by position). Slots the window hides, or that hold nothing yet (the
prompt's right padding beyond P included), get HIDDEN."""

import numpy as np

HIDDEN = 1 << 30  # a slot "position" no query reaches


class WindowSlots:
    def __init__(self, window):
        self.window = int(window)
        self.prefix = {}  # cache row -> its sequence's prompt length P

    def held(self, prompt_len, max_new_tokens):
        """Slots a sequence needs: its prompt and at most W answer tokens."""
        return prompt_len + min(max_new_tokens, self.window)

    def reset(self):
        self.prefix = {}

    def start(self, rows, lengths):
        """Sequences whose prompts (of `lengths` tokens) were just written to cache rows `rows`."""
        for row, length in zip(rows, lengths):
            self.prefix[int(row)] = int(length)

    def move(self, src, dst):
        """Cache row `src` was copied to row `dst`."""
        if src in self.prefix:
            self.prefix[dst] = self.prefix.pop(src)

    def step(self, positions, slots):
        """One decode step of the first len(positions) rows, the token of row b at absolute position positions[b]:
        (write slots [B] int32, slot positions [B, slots] int32: what each slot holds once the step has written,
        HIDDEN where the window hides it). A row with no prompt, or a position inside its prompt (idle rows of a
        batched step), is treated as a plain causal cache (slot = position)."""
        rows = len(positions)
        write = np.zeros(rows, np.int32)
        table = np.full((rows, slots), HIDDEN, np.int32)
        for b, q in enumerate(np.asarray(positions, np.int64)):
            p = self.prefix.get(b, 0)
            if q < p or p == 0:
                write[b] = q
                table[b, :q + 1] = np.arange(q + 1)
                continue
            j = q - p  # the answer's j-th token (0: the first fed back)
            write[b] = p + j % self.window
            table[b, :p] = np.arange(p)
            ring = np.arange(min(self.window, slots - p))  # a window longer than the cache's answer part: no wrap
            last = j - (j - ring) % self.window  # the latest answer index <= j each ring slot holds
            table[b, p:p + ring.shape[0]] = np.where(last >= 0, p + last, HIDDEN)
        return write, table
