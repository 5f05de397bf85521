"""The only door to git: the user's repository read-only (``repo``), private checkouts (``sandbox``)."""
