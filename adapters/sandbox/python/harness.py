# The harness: the interpreter the prelude execs (canon.py precedes it).
# Before the program starts it reads the run's mark from stdin and its
# steps from the descriptor the prelude named, and closes it. It runs
# main.py (the program alone) as the module __main__, then the steps in
# that module's namespace: set-up as it is, and for each check the
# expression, whose value it encodes (canon.py) and writes to stdout on a
# line of its own: "\n<mark> r<i> <encoding>\n", or "\n<mark> x<i> <why, as
# hex>\n" for a value that is not a built-in one. After the last step it
# writes "\n<mark> end\n". The grader compares the encodings with the
# expected ones, which never enter this process; a program that leaves
# early, or forges lines, passes nothing.
import os
import sys

_canon, _Refused = _canon_maker(1 << 20, 100)
_write, _read, _close = os.write, os.read, os.close
_exec, _eval, _compile, _str_encode, _bytes_hex = exec, eval, compile, str.encode, bytes.hex
_type, _type_name, _exception = type, type.__dict__["__name__"].__get__, Exception
_mark = sys.stdin.readline().strip().encode()
_fd = int(sys.argv[1])
_chunks = []
while True:
    _b = _read(_fd, 1 << 16)
    if not _b:
        break
    _chunks.append(_b)
_close(_fd)
import marshal  # noqa: E402  (a built-in module)

_steps = marshal.loads(b"".join(_chunks))
del _chunks, _b, _fd, marshal


def _record(body):
    _write(1, b"\n" + _mark + b" " + body + b"\n")


def _run():
    sys.argv = ["main.py"]
    harness = sys.modules["__main__"]  # noqa: F841  (held while the program runs)
    module = _type(sys)("__main__")
    module.__file__ = "main.py"
    module.__cached__ = None
    sys.modules["__main__"] = module
    with open("main.py", "rb") as f:
        code = _compile(f.read(), "main.py", "exec", dont_inherit=True)
    space = module.__dict__
    _exec(code, space)
    i = 0
    for kind, step in _steps:
        if kind == "s":
            _exec(step, space)
            continue
        value = _eval(step, space)
        try:
            body = b"r%d " % i + _str_encode(_canon(value), "ascii")
        except _Refused as e:
            body = b"x%d " % i + _str_encode(_bytes_hex(_str_encode(e.args[0], "utf-8", "surrogatepass")), "ascii")
        except _exception as e:
            why = "a value that could not be read (" + _type_name(_type(e)) + ")"
            body = b"x%d " % i + _str_encode(_bytes_hex(_str_encode(why, "utf-8", "replace")), "ascii")
        del value
        _record(body)
        i += 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except _exception:
            pass
    _record(b"end")


_run()
