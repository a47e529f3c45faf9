"""PP-DocLayoutV4's reading-order heads (transformers' PPDocLayoutV4GlobalPointer, SuccessorOrderHead,
RelativeOrderHead and S2RFusion) and its page-geometry head (PPDocLayoutV4DeformHead), inference only."""

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from ms_ocr.layout.backbone import Conv2d
from ms_ocr.nn.layers import Linear


class PairScorer(nn.Cell):
    """Pairwise logits [B, S, S] = q(x) k(x)^T / sqrt(head_dim): antisymmetrised (relative order: [i, j] > 0 reads
    i before j), or with the diagonal pushed to -1e4 (successor: [i, j] > 0 says j directly follows i)."""

    def __init__(self, dim, head_dim, antisymmetric, size):
        super().__init__()
        self.q_proj, self.k_proj = Linear(dim, head_dim), Linear(dim, head_dim)
        self.scaling = head_dim ** -0.5
        self.antisymmetric = antisymmetric
        self.eye = Tensor(np.eye(size, dtype=np.float32))

    def construct(self, x):
        logits = ops.matmul(self.q_proj(x), self.k_proj(x).transpose(0, 2, 1)) * self.scaling
        if self.antisymmetric:
            return logits - logits.transpose(0, 2, 1)
        return logits - self.eye * 1e4


class S2RFusion(nn.Cell):
    """closure_weight * antisymmetrised soft transitive closure of the successor graph + the relative logits: the
    adjacency sigmoid(successor) off the diagonal, rows with a sum above 1 scaled to 1, closure = sum over k of
    damping^(k-1) adjacency^k for k = 1..steps."""

    def __init__(self, cfg):
        super().__init__()
        self.closure_weight = Parameter(ops.zeros((1,), ms.float32), name="closure_weight")
        self.steps, self.damping = cfg.s2r_steps, cfg.s2r_damping
        self.off_diagonal = Tensor(1.0 - np.eye(cfg.num_queries, dtype=np.float32))

    def construct(self, relative, successor):
        adjacency = ops.sigmoid(successor) * self.off_diagonal
        adjacency = adjacency / ops.clip(adjacency.sum(-1, keepdims=True), 1.0, None)
        closure = adjacency
        power = adjacency
        for _ in range(self.steps - 1):
            power = self.damping * ops.matmul(adjacency, power)
            closure = closure + power
        return self.closure_weight * (closure - closure.transpose(0, 2, 1)) + relative


class SuccessorOrderHead(nn.Cell):
    """A projection per decoder layer (only the last one's is used at inference) and the successor scorer."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.proj = nn.CellList([Linear(d, d) for _ in range(cfg.decoder_layers)])
        self.global_pointer = PairScorer(d, cfg.global_pointer_head_size, False, cfg.num_queries)

    def construct(self, x):
        return self.global_pointer(self.proj[len(self.proj) - 1](x))


class RelativeOrderHead(nn.Cell):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.proj = nn.CellList([Linear(d, d) for _ in range(cfg.decoder_layers)])
        self.global_pointer = PairScorer(d, cfg.global_pointer_head_size, True, cfg.num_queries)
        self.s2r_fusion = S2RFusion(cfg)

    def construct(self, x, successor):
        return self.s2r_fusion(self.global_pointer(self.proj[len(self.proj) - 1](x)), successor)


def linspace(start, end, steps):
    """torch.linspace in float32: from the start up to the middle, from the end after it."""
    step = np.float32((end - start) / (steps - 1)) if steps > 1 else np.float32(0)
    i = np.arange(steps)
    half = steps // 2
    return np.where(i < half, np.float32(start) + step * i.astype(np.float32),
                    np.float32(end) - step * (steps - 1 - i).astype(np.float32)).astype(np.float32)


class DeformHead(nn.Cell):
    """Page geometry from one encoder map: the map with its x/y coordinates in [-1, 1] appended, dilated 3x3 convs
    (rates 1, 2, 4) with ReLU, a 1x1 conv to 1 + 4 + 2 + 2 K channels; channel 0 is a softmax attention over the
    positions pooling the rest. Returns [B, 5]: roll (quadrant * 90 + 45 * residual, wrapped to [-180, 180)), the
    quadrant's probability, shear (45 * residual), kx and ky (the expectation of K bin centres)."""

    def __init__(self, cfg):
        super().__init__()
        w, k = cfg.deform_conv_width, cfg.deform_kbins
        self.bins = k
        # the reference's nn.Sequential indices: ReLU modules between the convolutions (each applied inside the
        # convolution before it here)
        self.body = nn.CellList([Conv2d(cfg.encoder_hidden_dim + 2, w, 3, padding=1, act="relu"), nn.ReLU(),
                                 Conv2d(w, w, 3, padding=2, dilation=2, act="relu"), nn.ReLU(),
                                 Conv2d(w, w, 3, padding=4, dilation=4, act="relu"), nn.ReLU(),
                                 Conv2d(w, 1 + 4 + 2 + 2 * k, 1)])
        self.bin_centers = Parameter(Tensor(linspace(-cfg.deform_krange, cfg.deform_krange, k)), name="bin_centers",
                                     requires_grad=False)

    @staticmethod
    def coordinates(height, width):
        """[1, 2, H, W]: x then y, each linspace(-1, 1) along its axis (host table)."""
        gy, gx = np.meshgrid(linspace(-1, 1, height), linspace(-1, 1, width), indexing="ij")
        return Tensor(np.stack([gx, gy])[None].astype(np.float32))

    def construct(self, features, coords):
        b = features.shape[0]
        x = ops.concat((features, ops.broadcast_to(coords, (b,) + coords.shape[1:])), 1)
        for i in range(0, len(self.body), 2):
            x = self.body[i](x)
        x = x.reshape(b, x.shape[1], -1)
        pooled = (ops.softmax(x[:, :1], -1) * x[:, 1:]).sum(-1)  # [B, 6 + 2K]
        k = self.bins
        probabilities = ops.softmax(pooled[:, :4], -1)
        quadrant = ops.argmax(probabilities, -1).astype(ms.float32)
        roll = 90.0 * quadrant + 45.0 * pooled[:, 4]
        roll = ops.floor_mod(roll + 180.0, ops.full_like(roll, 360.0)) - 180.0
        kx = (ops.softmax(pooled[:, 6:6 + k], -1) * self.bin_centers).sum(-1)
        ky = (ops.softmax(pooled[:, 6 + k:6 + 2 * k], -1) * self.bin_centers).sum(-1)
        return ops.stack((roll, ops.amax(probabilities, -1), 45.0 * pooled[:, 5], kx, ky), -1)
