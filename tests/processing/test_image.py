"""load_image errors and formats; RGB conversion and pixel arithmetic against transformers' image_transforms."""

import io

import numpy as np
import pytest
from PIL import Image

from ms_ocr.processing.image import ImageError, load_image, normalize, rescale, to_chw_uint8, to_rgb


def _random_rgb(h=40, w=30, seed=0):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def _encoded(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _expect_error(path, *needles):
    with pytest.raises(ImageError) as info:
        load_image(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def test_missing_file(tmp_path):
    _expect_error(tmp_path / "nope.png", "not found")


def test_directory(tmp_path):
    _expect_error(tmp_path, "is a directory")


def test_empty_file(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    _expect_error(tmp_path / "empty.png", "empty (0 bytes)")


def test_text_file_named_png(tmp_path):
    (tmp_path / "text.png").write_text("hello, I am not a PNG\n")
    _expect_error(tmp_path / "text.png", "not a readable image")


def test_zero_width_png_header(tmp_path):
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 0, 5, 8, 2, 0, 0, 0)  # width 0, height 5, 8-bit RGB
    (tmp_path / "zero.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                                        + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    _expect_error(tmp_path / "zero.png", "not a readable image")


@pytest.mark.parametrize("fmt,suffix", [("PNG", "png"), ("JPEG", "jpg")])
def test_truncated_file_fails_on_load(tmp_path, fmt, suffix):
    data = _encoded(_random_rgb(64, 48), fmt)
    path = tmp_path / f"cut.{suffix}"
    path.write_bytes(data[: len(data) // 2])
    _expect_error(path, "truncated or corrupt", "image file is truncated")


@pytest.mark.parametrize("fmt,suffix,kw", [("PNG", "png", {}), ("WEBP", "webp", {"lossless": True}),
                                           ("BMP", "bmp", {}), ("TIFF", "tiff", {})])
def test_lossless_formats_round_trip_exactly(tmp_path, fmt, suffix, kw):
    img = _random_rgb(37, 23)
    path = tmp_path / f"img.{suffix}"
    path.write_bytes(_encoded(img, fmt, **kw))
    out = load_image(path)
    assert out.mode == "RGB" and out.size == (23, 37)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(img))


def test_jpeg_loads_as_rgb(tmp_path):
    path = tmp_path / "img.jpg"
    path.write_bytes(_encoded(Image.new("RGB", (17, 9), (200, 40, 90)), "JPEG", quality=100))
    out = np.asarray(load_image(path)).astype(int)
    assert out.shape == (9, 17, 3)
    assert np.abs(out - [200, 40, 90]).max() <= 2


def test_multipage_tiff_takes_first_frame(tmp_path):
    pages = [Image.new("RGB", (8, 6), (10, 20, 30)), Image.new("RGB", (5, 5), (250, 0, 0))]
    path = tmp_path / "pages.tiff"
    pages[0].save(path, save_all=True, append_images=pages[1:])
    out = load_image(path)
    assert out.size == (8, 6)
    assert out.getpixel((3, 3)) == (10, 20, 30)


def test_exif_orientation_is_applied(tmp_path):
    img = _random_rgb(10, 30)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "rot.jpg"
    img.save(path, exif=exif, quality=100)
    assert load_image(path).size == (10, 30)
    assert load_image(path, exif_transpose=False).size == (30, 10)


def _alpha_images():
    rgba = Image.new("RGBA", (3, 1))
    for x, px in enumerate([(255, 0, 0, 128), (10, 20, 30, 0), (1, 2, 3, 255)]):
        rgba.putpixel((x, 0), px)
    palette = Image.new("P", (2, 1))
    palette.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    palette.putpixel((1, 0), 1)
    palette.info["transparency"] = 0
    return {"RGBA": rgba, "LA": Image.new("LA", (1, 1), (100, 51)), "P+transparency": palette,
            "L": Image.new("L", (2, 2), 77), "CMYK": Image.new("CMYK", (2, 1), (0, 255, 0, 0)),
            "RGB": _random_rgb(4, 5)}


@pytest.mark.parametrize("mode", list(_alpha_images()))
def test_to_rgb_matches_transformers_convert_to_rgb(mode):
    from transformers.image_transforms import convert_to_rgb

    img = _alpha_images()[mode]
    np.testing.assert_array_equal(np.asarray(to_rgb(img)), convert_to_rgb(img, return_numpy=True))


def test_alpha_composited_onto_white():
    rgb = np.asarray(to_rgb(_alpha_images()["RGBA"]))
    assert rgb.tolist() == [[[255, 127, 127], [255, 255, 255], [1, 2, 3]]]
    assert np.asarray(to_rgb(_alpha_images()["P+transparency"])).tolist() == [[[255, 255, 255], [200, 100, 50]]]


def test_load_image_composites_saved_rgba_png(tmp_path):
    path = tmp_path / "alpha.png"
    _alpha_images()["RGBA"].save(path)
    assert np.asarray(load_image(path)).tolist() == [[[255, 127, 127], [255, 255, 255], [1, 2, 3]]]


def test_rescale_and_normalize_match_image_transforms():
    from transformers.image_transforms import normalize as ref_normalize
    from transformers.image_transforms import rescale as ref_rescale
    from transformers.image_utils import ChannelDimension

    chw = to_chw_uint8(_random_rgb(13, 11, seed=3))
    assert chw.shape == (3, 13, 11) and chw.dtype == np.uint8
    first = ChannelDimension.FIRST
    ours = rescale(chw, 0.00392156862745098)
    ref = ref_rescale(chw, 0.00392156862745098, data_format=first, input_data_format=first)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref)
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    np.testing.assert_array_equal(normalize(ours, mean, std),
                                  ref_normalize(ref, mean, std, data_format=first, input_data_format=first))
    # scalar mean/std broadcast to every channel; uint8 input is promoted to float32 first
    np.testing.assert_array_equal(normalize(chw, 127.5, 127.5), (chw.astype(np.float32) - 127.5) / 127.5)
    assert float(normalize(ours, [0.5] * 3, [0.5] * 3)[0, 0, 0]) == pytest.approx(chw[0, 0, 0] / 127.5 - 1, abs=1e-6)


def _gradient16(h=16, w=64):
    return (np.arange(h * w).reshape(h, w) * (65535 / (h * w - 1))).round().astype(np.uint16)


@pytest.mark.parametrize("fmt,suffix,dtype", [("PNG", "png", "<u2"), ("TIFF", "tif", "<u2"), ("TIFF", "tif", ">u2")])
def test_16bit_grayscale_is_scaled_not_clipped(tmp_path, fmt, suffix, dtype):
    """PIL's convert (the reference's convert_to_rgb) clips 16-bit values at 255: a 16-bit scan came out 99.6 %
    white. We scale v -> round(v * 255 / 65535) on purpose (a deviation from the reference,
    docs/batch-and-pipeline.md)."""
    from transformers.image_transforms import convert_to_rgb
    values = _gradient16()
    path = tmp_path / f"g16.{suffix}"
    Image.fromarray(values.astype(dtype)).save(path, fmt)
    with Image.open(path) as img:
        assert img.mode in ("I;16", "I;16B")
        assert (convert_to_rgb(img, return_numpy=True) == 255).mean() > 0.99  # the reference: almost all white
    out = np.asarray(load_image(path))
    want = ((values.astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8)
    np.testing.assert_array_equal(out, np.repeat(want[..., None], 3, axis=2))
    assert out[0, 0, 0] == 0 and out[-1, -1, 0] == 255 and abs(out.mean() - 127.5) < 0.6


def test_16bit_transparency_and_8bit_data_in_mode_i():
    values = _gradient16(2, 2)  # 0, 21845, 43690, 65535
    img = Image.fromarray(values)
    img.info["transparency"] = 21845  # a PNG tRNS gray value
    assert np.asarray(to_rgb(img))[..., 0].tolist() == [[0, 255], [170, 255]]  # that pixel composited on white
    eight = Image.fromarray(np.array([[0, 77], [200, 255]], np.int32))  # mode I holding 8-bit values
    assert eight.mode == "I"
    np.testing.assert_array_equal(np.asarray(to_rgb(eight)), np.asarray(eight.convert("RGB")))
