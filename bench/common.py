"""What the benchmark scripts share: where the repository is and which gpufeed binary to run."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_gpufeed(explicit):
    """``explicit`` when given; else a built gpufeed (release first, then debug) in the target
    folder (``CARGO_TARGET_DIR`` or ``target/``); else a release build of it."""
    if explicit:
        return explicit
    tdir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    for prof in ("release", "debug"):
        p = os.path.join(tdir, prof, "gpufeed")
        if os.path.exists(p):
            return p
    subprocess.run(["cargo", "build", "--release", "-p", "gpufeed"], cwd=ROOT, check=True)
    return os.path.join(tdir, "release", "gpufeed")


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of a live process, in seconds (fields 14 and 15 of /proc/PID/stat);
    None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None
