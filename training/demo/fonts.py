"""The fonts the demo data draws with (training/demo/data.py). They ship with the repository (font_files/: DejaVu
2.37 and Liberation 2.1.5 as Debian 12 packages them, free licences beside them), so the demo's accuracy gates run on
every machine, CI's included, with the same glyphs the demo was trained on; the system's copies (the Debian packages
FONT_PACKAGES) are a fallback. The standard library only."""

import os

BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "font_files")
FONT_DIRS = (BUNDLED, "/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation2")
# Regular, bold, condensed, mono, oblique: the shapes a printed page mixes.
TRAIN_FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf",
               "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansCondensed.ttf",
               "DejaVuSerifCondensed.ttf", "DejaVuSans-Oblique.ttf")
UNSEEN_FONT = "LiberationSans-Regular.ttf"  # an Arial-metric design the training never renders
UNSEEN_FONTS = (UNSEEN_FONT, "LiberationSerif-Regular.ttf")  # and a Times-metric one
FONT_PACKAGES = "fonts-dejavu-core fonts-dejavu-extra fonts-liberation2"


def _located(name):
    """The first FONT_DIRS path holding font file `name`, or None."""
    return next((path for path in (os.path.join(folder, name) for folder in FONT_DIRS) if os.path.isfile(path)),
                None)


def font_path(name):
    """Absolute path of a font file, or FileNotFoundError naming the Debian packages to install."""
    path = _located(name)
    if path is None:
        raise FileNotFoundError(f"font {name} not found in {', '.join(FONT_DIRS)}; install: apt-get install "
                                f"{FONT_PACKAGES}")
    return path


def missing_fonts():
    """The font files of TRAIN_FONTS and UNSEEN_FONTS that are not installed."""
    return [name for name in TRAIN_FONTS + UNSEEN_FONTS if _located(name) is None]


def missing_font_packages():
    """FONT_PACKAGES where a font of TRAIN_FONTS or UNSEEN_FONTS is not installed, else "" (what the test set-up,
    scripts/ensure_env.sh, installs: `python -m training.demo.fonts`)."""
    return FONT_PACKAGES if missing_fonts() else ""


if __name__ == "__main__":  # the packages to install, nothing when every font is there
    print(missing_font_packages())
