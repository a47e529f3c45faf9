"""PP-DocLayoutV2 (PaddlePaddle/PP-DocLayoutV2_safetensors): HGNetV2 + RT-DETR layout detector with a reading-order
network. Work in progress (issue 6): the model is built (see README.md); processor, converter and pipeline are not."""
