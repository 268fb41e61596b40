"""h3cy.ops — attn kernels (re-exported by h3cy.ops)."""
__all__ = []
