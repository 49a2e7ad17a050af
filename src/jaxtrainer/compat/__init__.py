"""Other libraries' call forms, kept apart from the core: :mod:`jaxtrainer.compat.evorl`."""
