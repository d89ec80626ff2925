"""The former name of fulcrum.torch, kept so that existing code keeps working:
``from fulcrum.torch_cp import FulcrumLoadBalancer`` is
``from fulcrum.torch import FulcrumLoadBalancer``. New code imports
fulcrum.torch. Importing either imports torch; ``import fulcrum`` does not."""

from .torch import *  # noqa: F401,F403
from .torch import __all__, _TorchLoadBalancer, support  # noqa: F401
