"""Moved to :mod:`jaxtrainer.distributed` (``vary_like``, ``tree_varying_axes``)."""

from jaxtrainer.distributed.axis import tree_varying_axes, vary_like

__all__ = ["tree_varying_axes", "vary_like"]
