"""Strategies: how a Module's state and steps are laid out on devices."""

from jaxtrainer.strategies._registry import available, register, resolve
from jaxtrainer.strategies.base import Strategy
from jaxtrainer.strategies.layout import LeafLayout
from jaxtrainer.strategies.multi_node import MultiNodeStrategy
from jaxtrainer.strategies.pmap import PmapStrategy
from jaxtrainer.strategies.shard_map import ShardMapStrategy
from jaxtrainer.strategies.single_device import SingleDeviceStrategy

register(SingleDeviceStrategy)
register(PmapStrategy)
register(ShardMapStrategy)
register(MultiNodeStrategy)

__all__ = [
    "LeafLayout",
    "MultiNodeStrategy",
    "PmapStrategy",
    "ShardMapStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "available",
    "register",
    "resolve",
]
