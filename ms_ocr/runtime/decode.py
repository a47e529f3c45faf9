"""The decode step: one new token for each of the first B sequence rows of the KV caches, one compiled graph per B
(the rows are a parameter of the call: the engine steps 1, 2, 4 or 8 rows of a larger cache) and per cache size.

The caches are runtime/kvcache.py's: written in this graph (GraphKVCache: Ascend, the exported text graph), or only
read here and written by the host from the step's outputs (HostKVCache). Which kernel runs each decoder layer (the
native DecodeLayer, its AMX variant, int8, composed) is the layer's choice from the kernels bound to the model
(nn.functional.decoder_layer_decode). One sequence of an MoE model whose experts are routed on the host steps through
runtime/moe.py instead. On the CPU, where the native kernels serve the whole step (SiLU-gated dense or DeepSeek MoE
layers, up to 8 rows), the host calls them itself (runtime/host_step.py: the same kernels without MindSpore's
launches between them) and this graph is not compiled."""

from mindspore import nn


class DecodeStep(nn.Cell):
    """input_ids [B, 1], pos [A, B, 1], cache_pos [B, 1], slot_ids = arange(T) (T positions per sequence in the
    cache), then the caches' step inputs (KVCache.step_caches: views of the first B rows, or none) -> logits [B, V]
    and, over caches the host writes (`in_graph` False), every layer's k, v [L, B, Hkv, 1, D] to store at cache_pos."""

    def __init__(self, model, in_graph):
        super().__init__(auto_prefix=False)
        self.model, self.in_graph = model, in_graph

    def construct(self, input_ids, pos, cache_pos, slot_ids, *caches):
        x = self.model.embed(input_ids)
        if self.in_graph:
            h = self.model.text(x, pos, cache_pos, slot_ids)
            return self.model.logits(self.model.final_norm(h[:, 0]))
        h, ks, vs = self.model.text_read_only(x, pos, cache_pos, slot_ids, caches if caches else None)
        return self.model.logits(self.model.final_norm(h[:, 0])), ks, vs
