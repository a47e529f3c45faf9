"""Feed-forward Cells: gated (SwiGLU-style, gate/up/down) and plain two-layer (fc1/fc2)."""

from mindspore import nn

from ms_ocr.nn import functional as F
from ms_ocr.nn.layers import Linear
from ms_ocr.ops import get_activation


class GatedMLP(nn.Cell):
    def __init__(self, hidden, intermediate, act="silu", bias=False):
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias)
        self.up_proj = Linear(hidden, intermediate, bias)
        self.down_proj = Linear(intermediate, hidden, bias)
        self.act = get_activation(act)

    def construct(self, x):
        return F.gated_mlp(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight, self.act)


class MLP(nn.Cell):
    def __init__(self, hidden, intermediate, act, bias=True):
        super().__init__()
        self.fc1 = Linear(hidden, intermediate, bias)
        self.fc2 = Linear(intermediate, hidden, bias)
        self.act = get_activation(act)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))
