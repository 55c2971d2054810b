"""Stand-in torch for gpufeed's tests: only what the injection touches."""
__version__ = "0.0.0+standin"
_precision = "highest"


def set_float32_matmul_precision(p):
    global _precision
    if p not in ("highest", "high", "medium"):
        raise RuntimeError("invalid precision " + p)
    _precision = p


def get_float32_matmul_precision():
    return _precision


from . import backends  # noqa: E402
from . import utils  # noqa: E402
from .utils import data  # noqa: E402,F401
