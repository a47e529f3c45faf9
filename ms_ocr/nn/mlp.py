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
        return F.gated_mlp(self.kernels, x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight, self.act)


class MLP(nn.Cell):
    """fc1 -> act -> fc2, the two Linears stored under `names` (checkpoint names, default fc1/fc2)."""

    def __init__(self, hidden, intermediate, act, bias=True, names=("fc1", "fc2")):
        super().__init__()
        self.names = names
        setattr(self, names[0], Linear(hidden, intermediate, bias))
        setattr(self, names[1], Linear(intermediate, hidden, bias))
        self.act = get_activation(act)

    def construct(self, x):
        first, second = getattr(self, self.names[0]), getattr(self, self.names[1])
        return second(self.act(self.kernels, first(x)))
