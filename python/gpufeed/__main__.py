"""``python -m gpufeed ARGS`` runs the ``gpufeed`` command installed by the same wheel."""

import os
import sys

from gpufeed._find import find_gpufeed_bin


def main():
    try:
        exe = find_gpufeed_bin()
    except FileNotFoundError as e:
        sys.stderr.write("gpufeed: error: %s\n" % e)
        return 127  # README exit codes: the command to run was not found
    argv = [exe] + sys.argv[1:]
    if sys.platform == "win32":  # pragma: no cover - gpufeed is Linux-only; kept for clarity
        import subprocess

        return subprocess.call(argv)
    os.execv(exe, argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
