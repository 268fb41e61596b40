# _kernels_attn.pxi — attention wrappers (included by _kernels.pyx).  Filled in with csrc/attn*.c.
