"""The IPython extension: ``%load_ext gpufeed``, then ``%%gpufeed`` on a cell, or ``%gpufeed start``
and ``%gpufeed stop`` around several cells (docs/notebooks.md).

The cell runs as it would without the magic (its output, its last expression's value); gpufeed
records the kernel meanwhile and shows its report after the cell's own output: HTML where the
front end shows HTML, the text report elsewhere. An exception from the cell is shown with the
report and then raised again, unchanged.
"""

import ast
import sys

from gpufeed._profile import GpufeedError, Profile, _active, iframe

_USAGE = "usage: %%gpufeed [--interval 100ms] [--no-py-stacks] [-o FILE] on a cell, or %gpufeed start|stop"

# The profile %gpufeed start began, until %gpufeed stop.
_started = [None]


def _parse(words):
    """Options shared by both forms; ValueError with the usage line on a bad one."""
    opts = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--interval", "-o", "--output", "--py-rate") and i + 1 < len(words):
            key = {"--interval": "interval", "--py-rate": "py_rate"}.get(w, "output")
            opts[key] = words[i + 1]
            i += 2
        elif w == "--no-py-stacks":
            opts["py_stacks"] = False
            i += 1
        elif w == "--no-auto-steps":
            opts["auto_steps"] = False
            i += 1
        else:
            raise ValueError("gpufeed: unknown option %r; %s" % (w, _USAGE))
    return opts


def _say(line):
    sys.stderr.write("gpufeed: %s\n" % line)
    sys.stderr.flush()


def show(p):
    """Shows profile ``p``'s report in the cell's output: HTML (isolated in an iframe so that its
    styles and the notebook's do not mix) with the text report as the plain-text fallback."""
    text = p.text or ""
    page = p.html()
    if not text and not page:
        if p.error:
            _say("no report: %s" % p.error)
        return
    bundle = {"text/plain": text.rstrip("\n") or "(gpufeed: no text report)"}
    if page:
        bundle["text/html"] = iframe(page)
    try:
        from IPython.display import display

        display(bundle, raw=True)
    except Exception:
        sys.stdout.write(text)
        sys.stdout.flush()


def _compile_cell(shell, cell):
    """The cell's code as IPython would run it (its magics and `!` lines transformed), compiled:
    a function that runs it and returns the value of its last line when that is an expression
    (the cell's Out). A SyntaxError is raised here, before anything is recorded."""
    src = shell.transform_cell(cell)
    tree = shell.compile.ast_parse(src)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree = ast.Module(tree.body[:-1], [])
    # A file name of its own in linecache: tracebacks and gpufeed's stages show the code.
    try:
        filename = shell.compile.cache(src, shell.execution_count, raw_code=cell)
    except TypeError:  # IPython < 8.5
        filename = shell.compile.cache(src, shell.execution_count)
    except Exception:
        filename = "<gpufeed cell>"
    body = shell.compile(tree, filename, "exec")
    value = shell.compile(last, filename, "eval") if last is not None else None
    ns = shell.user_ns

    def run():
        exec(body, ns)
        return eval(value, ns) if value is not None else None

    return run


def _run_cell_code(shell, cell):
    return _compile_cell(shell, cell)()


def _magic(line, cell=None):
    from IPython import get_ipython

    shell = get_ipython()
    words = line.split()
    if cell is None:
        return _line(words)
    try:
        opts = _parse(words)
    except ValueError as e:
        _say(str(e).replace("gpufeed: ", "", 1))
        return None
    if _active[0] is not None:
        _say("note: gpufeed is already recording this kernel (a %%gpufeed inside another, or "
             "after %gpufeed start): the cell runs, and the recording under way covers it")
        return _run_cell_code(shell, cell)
    run = _compile_cell(shell, cell)  # a cell that does not compile records nothing
    p = Profile(**opts)
    try:
        p.start()
    except GpufeedError as e:
        _say("%s; the cell runs without gpufeed" % e)
        return run()
    try:
        value = run()
    except BaseException:
        # The report first, then the cell's own exception, unchanged (KeyboardInterrupt too).
        p.stop()
        show(p)
        raise
    p.stop()
    show(p)
    shell.user_ns["_gpufeed"] = p
    return value


def _line(words):
    from IPython import get_ipython

    shell = get_ipython()
    if not words or words[0] not in ("start", "stop", "status"):
        _say(_USAGE)
        return None
    if words[0] == "status":
        p = _active[0]
        _say("recording to %s" % p.recording if p is not None else "not recording")
        return None
    if words[0] == "stop":
        p = _started[0]
        if p is None:
            _say("note: not recording (%gpufeed start begins a recording)")
            return None
        _started[0] = None
        p.stop()
        show(p)
        shell.user_ns["_gpufeed"] = p
        return None
    try:
        opts = _parse(words[1:])
    except ValueError as e:
        _say(str(e).replace("gpufeed: ", "", 1))
        return None
    if _active[0] is not None:
        _say("note: already recording this kernel: %gpufeed stop ends it")
        return None
    p = Profile(**opts)
    try:
        p.start()
    except GpufeedError as e:
        _say(str(e))
        return None
    _started[0] = p
    _say("recording this kernel to %s; %%gpufeed stop shows the report" % p.recording)
    return None


def load_ipython_extension(ipython):
    """``%load_ext gpufeed``: registers ``%gpufeed`` and ``%%gpufeed``."""
    ipython.register_magic_function(_magic, magic_kind="line_cell", magic_name="gpufeed")


def unload_ipython_extension(ipython):
    """``%unload_ext gpufeed``: stops a recording ``%gpufeed start`` began."""
    p = _started[0]
    _started[0] = None
    if p is not None:
        p.stop()
