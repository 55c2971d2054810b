from . import cudnn, cuda  # noqa: F401
