"""PP-DocLayoutV2 (PaddlePaddle/PP-DocLayoutV2_safetensors): HGNetV2 + RT-DETR layout detector with a reading-order
network. Work in progress (issue 6): the backbone is built; the hybrid encoder, decoder and reading order are not."""
