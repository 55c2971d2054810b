__version__ = "1.6.0+standin"
from . import utils  # noqa: E402,F401
from .utils import data  # noqa: E402,F401
