"""The model components: the transformer (``dit``), the Qwen3-VL text encoder with its
tokenizer and prompt cache, its vision tower and image processor (prompts that carry
pictures), and the video and audio VAE decoders.  Each one describes its
tensors and builds its layers on ``h3cy.ops``, reading weights through ``h3cy.weights``.
"""
