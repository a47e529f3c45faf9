"""The RT-DETR fields the PP-DocLayout configurations share (transformers' PPDocLayoutV2Config / V3 / V4), with the
reference classes' defaults, normalised in one place; each model's config.py adds its own fields."""

from dataclasses import dataclass, field

from ms_ocr.config_utils import CheckpointError
from ms_ocr.layout.backbone import HGNetV2Config

# The references' attribute maps: V2/V3 declare d_model and alias hidden_size onto it, V4 the reverse; both name the
# same width, kept here as d_model.
ALIASES = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads"}


@dataclass
class LayoutConfig:
    layer_norm_eps: float = 1e-5
    batch_norm_eps: float = 1e-5
    encoder_hidden_dim: int = 256
    encoder_in_channels: list = field(default_factory=lambda: [512, 1024, 2048])
    feat_strides: list = field(default_factory=lambda: [8, 16, 32])
    encoder_layers: int = 1
    encoder_ffn_dim: int = 1024
    encoder_attention_heads: int = 8
    encode_proj_layers: list = field(default_factory=lambda: [2])
    positional_encoding_temperature: int = 10000
    encoder_activation_function: str = "gelu"
    activation_function: str = "silu"
    eval_size: list = None
    normalize_before: bool = False
    hidden_expansion: float = 1.0
    d_model: int = 256
    num_queries: int = 300
    decoder_in_channels: list = field(default_factory=lambda: [256, 256, 256])
    decoder_ffn_dim: int = 1024
    num_feature_levels: int = 3
    decoder_n_points: int = 4
    decoder_layers: int = 6
    decoder_attention_heads: int = 8
    decoder_activation_function: str = "relu"
    learn_initial_query: bool = False
    anchor_image_size: list = None
    num_labels: int = 2  # PreTrainedConfig's default; id2label decides
    id2label: dict = None  # {int: name}; LABEL_i when the file has none, as PreTrainedConfig
    backbone: HGNetV2Config = field(default_factory=HGNetV2Config)

    NAME = "PP-DocLayout"
    # the backbone stages a checkpoint without backbone_config returns (the reference's sub-config defaults)
    BACKBONE_OUT = ("stage2", "stage3", "stage4")
    UNPROJECTED = 0  # leading backbone maps that skip the input projections
    NESTED = ("backbone",)

    @classmethod
    def from_dict(cls, raw):
        raw = dict(raw)
        for alias, name in ALIASES.items():
            if alias in raw and name not in raw:
                raw[name] = raw.pop(alias)
        if raw.get("id2label"):
            raw["id2label"] = {int(k): str(v) for k, v in raw["id2label"].items()}
            raw["num_labels"] = len(raw["id2label"])
            if sorted(raw["id2label"]) != list(range(raw["num_labels"])):
                raise CheckpointError(f"{cls.NAME} config: id2label keys must be 0..num_labels-1")
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw and k not in cls.NESTED}
        backbone = raw.get("backbone_config")
        backbone = {"out_features": list(cls.BACKBONE_OUT)} if backbone is None else backbone
        cfg = cls(**known, **cls.nested(raw), backbone=HGNetV2Config.from_dict(backbone, cls.UNPROJECTED))
        if cfg.id2label is None:
            cfg.id2label = {i: f"LABEL_{i}" for i in range(cfg.num_labels)}
        cfg.check()
        return cfg

    @classmethod
    def nested(cls, raw):
        """Sub-configs other than the backbone, by field name."""
        return {}

    def check(self):
        """Settings the checkpoints do not use, refused by name."""
        if self.normalize_before:
            raise CheckpointError(f"{self.NAME} with normalize_before=True is not supported (the checkpoints use "
                                  "False)")
        if self.num_feature_levels != len(self.decoder_in_channels) or self.learn_initial_query:
            raise CheckpointError(f"{self.NAME}: extra feature levels and learned initial queries are not supported")
        maps = len(self.backbone.out_features) - self.UNPROJECTED
        if maps != len(self.encoder_in_channels):
            raise CheckpointError(f"{self.NAME} config: the backbone returns {maps} map(s) for the encoder, "
                                  f"encoder_in_channels lists {len(self.encoder_in_channels)}")
