"""h3cy's version (also in pyproject.toml); the GEMM measurement is keyed by it (h3cy.ops.measurement)."""
__version__ = "0.1.0"
