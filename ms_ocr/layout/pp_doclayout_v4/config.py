"""PP-DocLayoutV4 configuration: transformers' PPDocLayoutV4Config fields on top of the shared RT-DETR ones
(layout/config.py; V4's `hidden_size` is the shared `d_model`), with the reference class's defaults."""

from dataclasses import dataclass

from ms_ocr.config_utils import CheckpointError
from ms_ocr.layout.config import LayoutConfig


@dataclass
class PPDocLayoutV4Config(LayoutConfig):
    num_coords: int = 10
    deform_pred: bool = False
    deform_level: int = 1
    deform_conv_width: int = 128
    deform_kbins: int = 41
    deform_krange: float = 1.5
    s2r_steps: int = 3
    s2r_damping: float = 0.5
    global_pointer_head_size: int = 64

    NAME = "PP-DocLayoutV4"

    def check(self):
        super().check()
        if self.num_coords != 10:
            raise CheckpointError(f"PP-DocLayoutV4 only supports num_coords=10 (quadrilaterals), got {self.num_coords}")
        if self.deform_pred and not 0 <= self.deform_level < len(self.encoder_in_channels):
            raise CheckpointError(f"PP-DocLayoutV4 config: deform_level {self.deform_level} is not an encoder output")
