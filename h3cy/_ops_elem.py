"""h3cy.ops — elem kernels (re-exported by h3cy.ops)."""
__all__ = []
