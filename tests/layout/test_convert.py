"""The PP-DocLayout rename tables on hand-written pairs: the checkpoints' original names (RT-DETR's, V4's reading-order
heads at the model level) -> the Cells' names, the keys dropped, and idempotence."""

import pytest

from ms_ocr.layout.pp_doclayout_v2 import name_table as v2_table
from ms_ocr.layout.pp_doclayout_v3 import PPDocLayoutV3Config
from ms_ocr.layout.pp_doclayout_v3 import name_table as v3_table
from ms_ocr.layout.pp_doclayout_v4 import name_table as v4_table

SHARED = [
    ("model.encoder.encoder.0.layers.0.self_attn.out_proj.weight", "model.encoder.aifi.0.layers.0.self_attn.o_proj.weight"),
    ("model.encoder.encoder.0.layers.0.fc2.bias", "model.encoder.aifi.0.layers.0.mlp.fc2.bias"),
    ("model.decoder.layers.5.fc1.weight", "model.decoder.layers.5.mlp.fc1.weight"),
    ("model.decoder.layers.2.self_attn.out_proj.bias", "model.decoder.layers.2.self_attn.o_proj.bias"),
    ("model.decoder.layers.2.encoder_attn.output_proj.weight", "model.decoder.layers.2.encoder_attn.output_proj.weight"),
    ("model.backbone.model.embedder.stem1.convolution.weight", "model.backbone.model.embedder.stem1.convolution.weight"),
    ("model.enc_bbox_head.layers.2.bias", "model.enc_bbox_head.layers.2.bias"),
    ("model.denoising_class_embed.weight", None),
    ("model.encoder.lateral_convs.0.norm.num_batches_tracked", None),
]
V2 = [("reading_order.encoder.rel_pos_x_bias.weight", None),
      ("reading_order.encoder.layer.0.attention.self.query.weight", "reading_order.encoder.layer.0.attention.self.query.weight")]
V3 = [("model.decoder.class_embed.weight", None), ("model.decoder.bbox_embed.layers.0.bias", None),
      ("model.decoder_global_pointer.dense.weight", "model.decoder_global_pointer.dense.weight"),
      ("model.encoder.mask_feature_head.scale_heads.2.layers.2.convolution.weight",
       "model.encoder.mask_feature_head.scale_heads.2.layers.2.convolution.weight")]
V4 = [("model.decoder_roor_order_head.5.weight", "model.decoder.successor_order_head.proj.5.weight"),
      ("model.decoder_roor_global_pointer.q_proj.bias", "model.decoder.successor_order_head.global_pointer.q_proj.bias"),
      ("model.decoder_order_head.0.bias", "model.decoder.relative_order_head.proj.0.bias"),
      ("model.decoder_global_pointer.k_proj.weight", "model.decoder.relative_order_head.global_pointer.k_proj.weight"),
      ("model.s2r_fusion.a", "model.decoder.relative_order_head.s2r_fusion.closure_weight"),
      ("model.deform_head.body.6.bias", "model.deform_head.body.6.bias"),
      ("model.deform_head.bin_centers", "model.deform_head.bin_centers")]


@pytest.mark.parametrize("version", ["v2", "v3", "v3-untied", "v4"])
def test_rename_pairs(version):
    table = {"v2": v2_table(), "v3": v3_table(PPDocLayoutV3Config()), "v4": v4_table(),
             "v3-untied": v3_table(PPDocLayoutV3Config(tie_word_embeddings=False))}[version]
    own = {"v2": V2, "v3": V3, "v4": V4, "v3-untied": [(k, k) for k, _ in V3[:2]]}[version]
    for hf, local in SHARED + own:
        assert table(hf) == local, hf
        if local is not None:
            assert table(local) == local  # idempotent
