"""Host-side (NumPy/PIL) preprocessing shared by the models: images, grids, tokenizers, chat templates."""
