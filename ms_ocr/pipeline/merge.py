"""Merging neighbouring text blocks into one recogniser image (PaddleX 3.7.2 paddleocr_vl/uilts.merge_blocks, on with
`merge_layout_blocks: True` in every PaddleOCR-VL yaml).

Consecutive blocks that may merge (any label but the picture labels and `table`) form a group when both are `text`
and either sit side by side (no horizontal overlap, the second starting to the right of the first's end, above its
bottom, within 0.3 of the wider one's width) or one below the other (horizontal overlap, the vertical gap under
half the taller one's height, exactly one of the left or right edges aligned within 5 px, and their joint box
touching a block that may not merge). A group's crops are stacked on a white canvas and read once, by its first
block; the other members get no text. Unless the stack would be 3 times taller than wide: then the blocks stay
apart. Blocks that may not merge lying inside a group's span come right after the group."""

from PIL import Image

ALIGNED = 5  # px
SIDE_GAP, STACK_GAP, TALL = 0.3, 0.5, 3


def _aligned(a, b):
    return abs(a - b) <= ALIGNED


def _horizontal_overlap(a, b):
    """Overlap of the x extents over their union's width (0 without overlap)."""
    inter = min(a[2], b[2]) - max(a[0], b[0])
    if inter <= 0:
        return 0.0
    union = max(a[2], b[2]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def _touches(box, other):
    return min(box[2], other[2]) > max(box[0], other[0]) and min(box[3], other[3]) > max(box[1], other[1])


def _joins(prev, cur, fixed_boxes):
    """How `cur` joins the group ending with `prev`: "center", "left", "right", or None (it starts a new one)."""
    if not (prev.label == cur.label == "text"):
        return None
    p, c = prev.box, cur.box
    overlap = _horizontal_overlap(c, p)
    if overlap == 0:
        side = c[0] > p[2] and c[1] < p[3] and c[0] - p[2] < SIDE_GAP * max(p[2] - p[0], c[2] - c[0])
        return "center" if side else None
    left, right = _aligned(c[0], p[0]), _aligned(c[2], p[2])
    if c[3] < p[1] or abs(c[1] - p[3]) >= STACK_GAP * max(p[3] - p[1], c[3] - c[1]) or left == right:
        return None
    joint = (min(p[0], c[0]), min(p[1], c[1]), max(p[2], c[2]), max(p[3], c[3]))
    if not any(_touches(joint, other) for other in fixed_boxes):
        return None
    return "left" if left else "right"


def groups(blocks, fixed_labels):
    """[(indices, aligns)] of the blocks whose labels are not in `fixed_labels`, in order; aligns[k] is how
    member k + 1 is placed under the members before it."""
    movable = [i for i, b in enumerate(blocks) if b.label not in fixed_labels]
    out = []
    for n, i in enumerate(movable):
        how = None
        if n:
            prev = movable[n - 1]
            fixed = [b.box for k, b in enumerate(blocks) if k not in (i, prev) and b.label in fixed_labels]
            how = _joins(blocks[prev], blocks[i], fixed)
        if how is None:
            out.append(([i], []))
        else:
            out[-1][0].append(i)
            out[-1][1].append(how)
    return out


def stack(images, aligns):
    """Images one under the other on a white RGB canvas as wide as the widest; each step places the stack so far and
    the next image centred, left- or right-aligned in the wider of the two."""
    offsets, width = [0] * len(images), images[0].width
    for k in range(1, len(images)):
        w = images[k].width
        step = max(width, w)
        shift, own = {"center": ((step - width) // 2, (step - w) // 2), "right": (step - width, step - w)}.get(
            aligns[k - 1], (0, 0))
        offsets[:k] = [o + shift for o in offsets[:k]]
        offsets[k], width = own, step
    canvas = Image.new("RGB", (width, sum(im.height for im in images)), (255, 255, 255))
    y = 0
    for im, x in zip(images, offsets):
        canvas.paste(im, (x, y))
        y += im.height
    return canvas


def merge(blocks, images, fixed_labels):
    """(order, images, group_of): the blocks' new order (indices into `blocks`), the image each block sends to the
    recogniser (None: a merged member, no request) and each block's group (the index of its first member, or its
    own index)."""
    group_of = list(range(len(blocks)))
    out_images = list(images)
    plan = {}
    for members, aligns in groups(blocks, fixed_labels):
        plan[members[0]] = (members, aligns)
    order, used, i = [], set(), 0
    while i < len(blocks):
        if i in plan:
            members, aligns = plan[i]
            crops = [images[k] for k in members]
            tall = sum(im.height for im in crops) / max(im.width for im in crops) >= TALL
            if not tall:
                for k in members:
                    group_of[k] = members[0]
                    out_images[k] = None
                out_images[members[0]] = stack(crops, aligns) if len(crops) > 1 else crops[0]
            order += members
            used.update(members)
            inside = [k for k in range(members[0] + 1, members[-1]) if blocks[k].label in fixed_labels]
            order += inside
            used.update(inside)
            i = members[-1] + 1
            continue
        if blocks[i].label in fixed_labels and i not in used:
            order.append(i)
            used.add(i)
        i += 1
    return order, out_images, group_of
