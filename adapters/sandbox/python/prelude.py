# The prelude: the first program of every run, inside the sandbox, before
# any of the answer's code (canon.py precedes it). Its arguments are the
# interpreter, the harness's source, the descriptors of the item's tests
# (read) and of its report to the grader (written), and the limits.
#
# It reads the suite's tests and turns them into a plan: every top-level
#
#   assert <expression> == <literal>    (or <literal> == <expression>)
#   assert <expression> != <literal>
#   assert <expression> is [not] None | True | False
#   assert [not] <expression>           (the expression must be True, or False)
#
# is a check: the expression is what the harness evaluates in the
# program's namespace, and the literal, encoded here, is what the grader
# compares the encoded result with, outside the sandbox. Any other
# statement is set-up, run as it is, in order, in the program's
# namespace; it may hold no assert or raise (a check the program's
# objects would judge). The literals go to the grader only, through a pipe
# closed before the program starts; the harness gets the compiled
# expressions and set-up, never the expected values nor the messages.
#
# It then closes every other descriptor, sets the limits and execs the
# harness in a fresh interpreter.
import _ast
import marshal
import os
import resource as r
import sys

python, harness, tests_fd, report_fd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
limits = [int(a) for a in sys.argv[5:10]]

fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
for fd in sorted(fds):
    if fd > 2 and fd not in (tests_fd, report_fd):
        try:
            os.close(fd)
        except OSError:
            pass

canon, Refused = _canon_maker(1 << 20, 100)
ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


class Bad(Exception):
    pass


def literal(node):
    # ast.literal_eval's literals, and set() and frozenset(<literal>).
    t = type(node)
    if t is _ast.Constant:
        return node.value
    if t is _ast.UnaryOp and type(node.op) in (_ast.USub, _ast.UAdd):
        v = literal(node.operand)
        if type(v) in (int, float):
            return -v if type(node.op) is _ast.USub else +v
    elif t is _ast.Tuple:
        return tuple(literal(e) for e in node.elts)
    elif t is _ast.List:
        return [literal(e) for e in node.elts]
    elif t is _ast.Set:
        return {literal(e) for e in node.elts}
    elif t is _ast.Dict:
        if None not in node.keys:
            return {literal(k): literal(v) for k, v in zip(node.keys, node.values)}
    elif t is _ast.Call and type(node.func) is _ast.Name and not node.keywords and node.func.id in ("set", "frozenset"):
        make = set if node.func.id == "set" else frozenset
        if not node.args:
            return make()
        if len(node.args) == 1:
            return make(literal(node.args[0]))
    raise Bad()


def is_literal(node):
    try:
        literal(node)
        return True
    except Bad:
        return False
    except Exception:  # an unhashable member: a literal, and a bad one
        return True


def walk(node):
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for f in n._fields:
            v = getattr(n, f, None)
            if isinstance(v, list):
                todo.extend(x for x in v if isinstance(x, _ast.AST))
            elif isinstance(v, _ast.AST):
                todo.append(v)


def segment(lines, node):
    # The source of node (its offsets count UTF-8 bytes), on one line.
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        text = lines[first][node.col_offset:node.end_col_offset]
    else:
        text = lines[first][node.col_offset:] + b"\n" + b"\n".join(lines[first + 1:last]) + b"\n" + lines[last][:node.end_col_offset]
    return " ".join(text.decode("utf-8", "replace").split())


def check(stmt, lines):
    # (expression, op, expected, message) of an assert, or Bad with why.
    test = stmt.test
    op = "eq"
    if type(test) is _ast.Compare:
        if len(test.ops) != 1:
            raise Bad("a chained comparison is not a check")
        cmp, left, right = type(test.ops[0]), test.left, test.comparators[0]
        if cmp in (_ast.Eq, _ast.NotEq):
            op = "eq" if cmp is _ast.Eq else "ne"
            if is_literal(right):
                expr, want = left, right
            elif is_literal(left):
                expr, want = right, left
            else:
                raise Bad("neither side of %s is a literal" % ("==" if op == "eq" else "!="))
        elif cmp in (_ast.Is, _ast.IsNot):
            op = "eq" if cmp is _ast.Is else "ne"
            if type(right) is _ast.Constant and right.value in (None, True, False) and type(right.value) in (type(None), bool):
                expr, want = left, right
            else:
                raise Bad("`is` compares with None, True or False only")
        else:
            raise Bad("not a check: write assert <expression> == <literal> (or !=, is None/True/False, or a bare assert for True)")
        try:
            value = literal(want)
        except Bad:
            raise Bad("the literal is not one") from None
        except Exception as e:
            raise Bad("the literal cannot be built: %s" % e) from None
    elif type(test) is _ast.UnaryOp and type(test.op) is _ast.Not:
        expr, value = test.operand, False
    else:
        expr, value = test, True
    try:
        encoded = canon(value)
    except Refused as e:
        raise Bad("the literal %s cannot be compared: %s" % (segment(lines, want), e)) from None
    msg = ""
    if stmt.msg is not None:
        if type(stmt.msg) is _ast.Constant and type(stmt.msg.value) is str:
            msg = stmt.msg.value
        else:
            msg = segment(lines, stmt.msg)
    return expr, op, encoded, msg


def hexs(s):
    return s.encode("utf-8", "surrogatepass").hex()


def plan(text):
    # The harness's steps and the grader's report.
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.encode("utf-8", "surrogatepass").split(b"\n")
    try:
        tree = compile(text, "tests", "exec", ONLY_AST, dont_inherit=True)
    except SyntaxError as e:
        raise Bad("tests: SyntaxError: %s (line %s)" % (e.msg, e.lineno)) from None
    steps, report = [], []
    for stmt in tree.body:
        where = "line %d: " % stmt.lineno
        if type(stmt) is _ast.Assert:
            try:
                expr, op, encoded, msg = check(stmt, lines)
            except Bad as e:
                raise Bad(where + "assert " + segment(lines, stmt.test) + ": " + str(e)) from None
            code = compile(_ast.Expression(body=expr), "tests", "eval", dont_inherit=True)
            steps.append(("c", code))
            report.append("check %d %s %s %s %s" % (stmt.lineno, op, encoded, hexs(segment(lines, stmt.test)), hexs(msg)))
            continue
        for n in walk(stmt):
            if type(n) in (_ast.Assert, _ast.Raise):
                raise Bad(where + "an assert or raise inside a statement: the checks are the top-level asserts")
        code = compile(_ast.Module(body=[stmt], type_ignores=[]), "tests", "exec", dont_inherit=True)
        steps.append(("s", code))
    if text.strip() and not report:
        raise Bad("no check: the tests hold no top-level assert")
    return steps, report


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


tests = read_all(tests_fd).decode("utf-8", "surrogateescape")
os.close(tests_fd)
try:
    steps, report = plan(tests)
except Bad as e:
    write_all(report_fd, ("bad " + hexs(str(e)) + "\n").encode())
    os._exit(0)
write_all(report_fd, ("\n".join(report + ["ok"]) + "\n").encode())
os.close(report_fd)

# The harness reads its steps from a memory file, closed before the
# program starts.
steps_fd = os.memfd_create("lowbarena-steps", 0)
write_all(steps_fd, marshal.dumps(steps))
os.lseek(steps_fd, 0, os.SEEK_SET)

memory, cpu, cpu_hard, procs, file_size = limits
for k, soft, hard in ((r.RLIMIT_AS, memory, memory), (r.RLIMIT_CPU, cpu, cpu_hard), (r.RLIMIT_NPROC, procs, procs),
                      (r.RLIMIT_FSIZE, file_size, file_size), (r.RLIMIT_CORE, 0, 0)):
    cap = r.getrlimit(k)[1]
    if cap != r.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    r.setrlimit(k, (soft, hard))
os.execv(python, [python, "-I", "-B", "-c", harness, str(steps_fd)])
