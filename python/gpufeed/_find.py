"""Finds the ``gpufeed`` binary that pip installed with this package (as ruff and py-spy do)."""

import os
import sys
import sysconfig

EXE = "gpufeed" + (sysconfig.get_config_var("EXE") or "")


def _candidates():
    # 1. The scripts folder of this interpreter's install (a venv's bin/, /usr/local/bin, ...).
    yield sysconfig.get_path("scripts")
    # 2. `pip install --user`: the user scheme's scripts folder.
    user_scheme = {"nt": "nt_user", "posix": "posix_user"}.get(os.name)
    if sys.version_info >= (3, 10):
        user_scheme = sysconfig.get_preferred_scheme("user")
    if user_scheme in sysconfig.get_scheme_names():
        yield sysconfig.get_path("scripts", scheme=user_scheme)
    # 3. `pip install --target DIR`: DIR/bin beside DIR/gpufeed.
    yield os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin")


def find_gpufeed_bin():
    """Path of the installed ``gpufeed`` executable; FileNotFoundError says where it looked."""
    looked = []
    for folder in _candidates():
        if not folder or folder in looked:
            continue
        looked.append(folder)
        path = os.path.join(folder, EXE)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        "the gpufeed binary is not installed beside this Python package (looked in %s); "
        "reinstall with `pip install --force-reinstall gpufeed`" % ", ".join(looked)
    )
