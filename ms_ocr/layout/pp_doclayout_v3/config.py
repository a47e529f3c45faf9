"""PP-DocLayoutV3 configuration: transformers' PPDocLayoutV3Config fields on top of the shared RT-DETR ones
(layout/config.py), with the reference class's defaults."""

from dataclasses import dataclass, field

from ms_ocr.config_utils import CheckpointError
from ms_ocr.layout.config import LayoutConfig


@dataclass
class PPDocLayoutV3Config(LayoutConfig):
    mask_feature_channels: list = field(default_factory=lambda: [64, 64])
    x4_feat_dim: int = 128
    num_prototypes: int = 32
    mask_enhanced: bool = True
    global_pointer_head_size: int = 64
    tie_word_embeddings: bool = True  # the decoder's class and box heads are the encoder's

    NAME = "PP-DocLayoutV3"
    BACKBONE_OUT = ("stage1", "stage2", "stage3", "stage4")
    UNPROJECTED = 1  # the stride-4 map feeds the mask head

    def check(self):
        super().check()
        first = self.backbone.out_indices[0]
        if first == 0 or self.backbone.stage_out_channels[first - 1] != self.x4_feat_dim:
            raise CheckpointError(f"PP-DocLayoutV3 config: x4_feat_dim {self.x4_feat_dim} must be the channels of the "
                                  "backbone's first returned stage")
