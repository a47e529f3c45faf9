"""PP-DocLayoutV2 configuration: transformers' PPDocLayoutV2Config fields on top of the shared RT-DETR ones
(layout/config.py), with the reference class's defaults, and its reading-order sub-config."""

from dataclasses import dataclass, field

from ms_ocr.config_utils import CheckpointError
from ms_ocr.layout.config import LayoutConfig
from ms_ocr.layout.pp_doclayout_v2.reading_order import ReadingOrderConfig


@dataclass
class PPDocLayoutV2Config(LayoutConfig):
    class_thresholds: list = None
    class_order: list = None
    reading_order: ReadingOrderConfig = field(default_factory=ReadingOrderConfig)

    NAME = "PP-DocLayoutV2"
    NESTED = ("backbone", "reading_order")

    @classmethod
    def nested(cls, raw):
        return {"reading_order": ReadingOrderConfig.from_dict(raw.get("reading_order_config") or {})}

    def check(self):
        super().check()
        if self.class_thresholds is None or self.class_order is None:
            raise CheckpointError("PP-DocLayoutV2 config needs class_thresholds and class_order")
        if len(self.class_thresholds) != self.num_labels or len(self.class_order) != self.num_labels:
            raise CheckpointError("PP-DocLayoutV2 config: class_thresholds and class_order need one entry per label")
