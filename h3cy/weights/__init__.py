"""Reading weights: safetensors files (mmap, zero-copy views), the transformer checkpoint's
layouts (diffusers, the original release), model-folder discovery, the converted-weight
cache, linears that use checkpoint tensors in place, and page advice for streaming.

A new file format is added here, as a reader; the models in ``h3cy.models`` consume
weights through it.
"""
