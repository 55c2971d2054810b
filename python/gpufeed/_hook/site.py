"""The start-up in the job's Python (run by ``sitecustomize``): reads gpufeed's settings from
``config.json`` in the folder gpufeed wrote, and installs the import hook that, when the job
itself imports torch, applies the ``--dataloader``/``--torch`` overrides, times the DataLoader's
batches as step markers and checks the pipeline. Everything it does is reported as NDJSON lines
in ``report.ndjson`` there; every failure is reported, never raised into the job."""

import os
import sys

from . import imports, overrides, pipeline, steps

# The modules whose import installs the hooks: torch itself (its switches, the optimizer hook)
# and the two that define DataLoader.
WATCHED = ("torch", "torch.utils.data.dataloader", "torch.utils.data")


def reporter(path):
    """``emit(event, **fields)``: one NDJSON line appended to ``path`` (one write, so lines of
    several processes do not interleave)."""
    import json
    import time

    def emit(event, **fields):
        fields["event"] = event
        fields["pid"] = os.getpid()
        fields["t_unix"] = time.time()
        try:
            line = (json.dumps(fields, default=repr) + "\n").encode("utf-8", "replace")
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except Exception:
            pass

    return emit


def install(here):
    """Installs what ``here/config.json`` asks for."""
    import json

    emit = reporter(os.path.join(here, "report.ndjson"))
    try:
        with open(os.path.join(here, "config.json")) as f:
            cfg = json.load(f)
    except Exception as e:
        emit("error", detail="cannot read gpufeed's config: %r" % (e,))
        return
    loader_cfg = cfg.get("dataloader") or {}
    torch_cfg = cfg.get("torch") or {}
    auto_steps = bool(cfg.get("steps")) and bool(os.environ.get("GPUFEED_STEP_SOCKET"))
    emit("python", argv=list(getattr(sys, "argv", []) or [])[:8], executable=sys.executable)
    if not loader_cfg and not torch_cfg and not auto_steps:
        return
    timer = steps.AutoSteps(emit) if auto_steps else None
    check = pipeline.PipelineCheck(emit)

    def after_import(name, module):
        try:
            if name == "torch":
                emit("torch", version=str(getattr(module, "__version__", "")))
                if torch_cfg:
                    overrides.apply_torch(module, torch_cfg, emit)
            cls = getattr(module, "DataLoader", None)
            if isinstance(cls, type) and (loader_cfg or timer is not None):
                overrides.patch_dataloader(cls, loader_cfg, emit, check.loader_created)
            if timer is not None:
                timer.install(name, module)
            if name == "torch":
                check.install()
        except Exception as e:
            emit("error", detail="while patching %s: %r" % (name, e))

    # torch imported before this ran (it should not be): install() patches what is there now.
    imports.ImportHook(WATCHED, after_import).install()
