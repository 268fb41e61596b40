# _kernels_elem.pxi — element-wise/row op wrappers (included by _kernels.pyx).  Filled in with csrc/elem*.c.
