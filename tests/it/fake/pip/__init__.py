"""A stand-in for pip inside the tests' fake E2B sandboxes (see __main__.py)."""
