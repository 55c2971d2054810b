"""The IPython extension: ``%load_ext gpufeed``, then ``%%gpufeed`` on a cell, or ``%gpufeed start``
and ``%gpufeed stop`` around several cells (docs/notebooks.md).

The cell runs as it would without the magic (its output, its last expression's value); gpufeed
records the kernel meanwhile and shows its report after the cell's own output: HTML where the
front end shows HTML, the text report elsewhere. An exception from the cell is shown with the
report and then raised again, unchanged.
"""

import ast
import inspect
import io
import re
import sys
import tokenize

from gpufeed._profile import GpufeedError, Profile, _active, iframe

_USAGE = ("usage: %%gpufeed [--interval 100ms] [--py-rate HZ] [--no-py-stacks] [--no-auto-steps] "
          "[-o FILE] on a cell, or %gpufeed start|stop|status")

# The profile %gpufeed start began, until %gpufeed stop.
_started = [None]


def _usage_error(msg):
    """IPython's UsageError (shown as one line, and it stops "Run All"), else ValueError."""
    try:
        from IPython.core.error import UsageError
    except ImportError:  # pragma: no cover - the magic only runs under IPython
        return ValueError(msg)
    return UsageError(msg)


def _parse(words):
    """Options shared by both forms; a UsageError with the usage line on a bad one."""
    opts = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--interval", "-o", "--output", "--py-rate"):
            if i + 1 >= len(words):
                raise _usage_error("gpufeed: %s needs a value; %s" % (w, _USAGE))
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
            raise _usage_error("gpufeed: unknown option %r; %s" % (w, _USAGE))
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


# Compiled as IPython compiles a cell under autoawait: a top-level `await` runs as it would
# without the magic.
_TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)


def _ends_with_semicolon(src):
    """Whether the code's last token is `;` (IPython shows no Out for such a cell)."""
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT,
            tokenize.DEDENT)
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type not in skip]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return False
    return bool(toks) and toks[-1].string == ";"


def _compile_cell(shell, cell):
    """The cell's code as IPython would run it (its magics and `!` lines transformed), compiled:
    a coroutine function that runs it and returns the value of its last line when that is an
    expression (the cell's Out; None when the cell ends with `;`). A SyntaxError is raised here,
    before anything is recorded. ``run.is_async``: the cell awaits at top level."""
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
    flags = getattr(shell.compile, "flags", 0) | _TOP_LEVEL_AWAIT
    body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    value = compile(last, filename, "eval", flags=flags, dont_inherit=True) \
        if last is not None else None
    quiet = _ends_with_semicolon(src)
    ns = shell.user_ns

    def awaits(code):
        return code is not None and bool(code.co_flags & inspect.CO_COROUTINE)

    async def run():
        r = eval(body, ns)
        if awaits(body):
            await r
        v = eval(value, ns) if value is not None else None
        if awaits(value):
            v = await v
        return None if quiet else v

    run.is_async = awaits(body) or awaits(value)
    return run


def _run_sync(coro):
    """Runs a coroutine that never awaits (a cell without a top-level `await`) to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("gpufeed: the cell awaited outside IPython's autoawait")


def _prepare(shell, line, cell):
    """The cell compiled and its recorder started: ``(run, profile)``, ``profile`` None when the
    cell runs without one (a recording under way covers it, or gpufeed could not start). A bad
    option is a UsageError, so the cell does not run and "Run All" stops there."""
    opts = _parse(line.split())
    if _active[0] is not None:
        _say("note: gpufeed is already recording this kernel (a %%gpufeed inside another, or "
             "after %gpufeed start): the cell runs, and the recording under way covers it")
        return _compile_cell(shell, cell), None
    run = _compile_cell(shell, cell)  # a cell that does not compile records nothing
    p = Profile(**opts)
    try:
        p.start()
    except GpufeedError as e:
        if e.usage:
            raise _usage_error(str(e))
        _say("%s; the cell runs without gpufeed" % e)
        return run, None
    return run, p


def _finish(shell, p):
    p.stop()
    show(p)
    shell.user_ns["_gpufeed"] = p


def _magic(line, cell=None):
    from IPython import get_ipython

    shell = get_ipython()
    if cell is None:
        return _line(line.split())
    run, p = _prepare(shell, line, cell)
    if p is None:
        return _run_sync(run())
    try:
        value = _run_sync(run())
    except BaseException:
        # The report first, then the cell's own exception, unchanged (KeyboardInterrupt too).
        _finish(shell, p)
        raise
    _finish(shell, p)
    return value


async def _magic_async(line, cell):
    """%%gpufeed on a cell with a top-level `await` (see `_await_cells`): the same, awaited in
    the kernel's own loop, as the cell would be without the magic."""
    from IPython import get_ipython

    shell = get_ipython()
    run, p = _prepare(shell, line, cell)
    if p is None:
        return await run()
    try:
        value = await run()
    except BaseException:
        _finish(shell, p)
        raise
    _finish(shell, p)
    return value


def _await_cells(lines):
    """An input transformer: a %%gpufeed cell whose body awaits at top level becomes one awaited
    call, so that IPython runs it asynchronously as it runs such a cell without the magic (a cell
    magic is otherwise called synchronously, and its `await` is a SyntaxError)."""
    if not lines or not re.match(r"%%gpufeed(\s|$)", lines[0]):
        return lines
    line = lines[0][len("%%gpufeed"):].strip()
    body = "".join(lines[1:])
    try:
        from IPython import get_ipython

        shell = get_ipython()
        src = shell.transform_cell(body)
        code = compile(src, "<gpufeed cell>", "exec",
                       flags=getattr(shell.compile, "flags", 0) | _TOP_LEVEL_AWAIT,
                       dont_inherit=True)
    except Exception:  # its SyntaxError is shown when the magic compiles it
        return lines
    if not (code.co_flags & inspect.CO_COROUTINE) or not getattr(shell, "autoawait", True):
        return lines
    return ["await __import__('gpufeed._ipython', fromlist=['_magic_async'])"
            "._magic_async(%r, %r)\n" % (line, body)]


def _line(words):
    from IPython import get_ipython

    shell = get_ipython()
    if not words or words[0] not in ("start", "stop", "status"):
        raise _usage_error("gpufeed: %s" % _USAGE)
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
    opts = _parse(words[1:])
    if _active[0] is not None:
        _say("note: already recording this kernel: %gpufeed stop ends it")
        return None
    p = Profile(**opts)
    # Noted before it starts (a start that fails undoes itself): an interrupt just after the
    # start cannot leave a recorder that %gpufeed stop does not know.
    _started[0] = p
    try:
        p.start()
    except GpufeedError as e:
        _started[0] = None
        if e.usage:
            raise _usage_error(str(e))
        _say(str(e))
        return None
    except BaseException:
        _started[0] = None
        raise
    _say("recording this kernel to %s; %%gpufeed stop shows the report" % p.recording)
    return None


def load_ipython_extension(ipython):
    """``%load_ext gpufeed``: registers ``%gpufeed`` and ``%%gpufeed``."""
    ipython.register_magic_function(_magic, magic_kind="line_cell", magic_name="gpufeed")
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and _await_cells not in cleanup:
        cleanup.append(_await_cells)


def unload_ipython_extension(ipython):
    """``%unload_ext gpufeed``: stops a recording ``%gpufeed start`` began."""
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and _await_cells in cleanup:
        cleanup.remove(_await_cells)
    p = _started[0]
    _started[0] = None
    if p is not None:
        p.stop()
