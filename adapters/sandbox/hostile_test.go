package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/sandbox"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// Code items whose results are of other built-in types than addItem's.
var (
	scaleItem = suite.Item{ID: "k-scale", Grader: suite.GraderCode, Prompt: "Write scale(xs).",
		Tests: "assert scale([1, 2, 3]) == [2, 4, 6]\nassert scale([]) == []\n"}
	wordItem = suite.Item{ID: "k-word", Grader: suite.GraderCode, Prompt: "Write twice(w).",
		Tests: "assert twice('ab') == 'ab ab'\nassert twice('c') == 'c c'\n"}
	halfItem = suite.Item{ID: "k-half", Grader: suite.GraderCode, Prompt: "Write half(n).",
		Tests: "assert half(3) == 1.5\nassert half(1) == 0.5\n"}
	countItem = suite.Item{ID: "k-count", Grader: suite.GraderCode, Prompt: "Write count(s).",
		Tests: "assert count('aab') == {'a': 2, 'b': 1}\nassert count('') == {}\n"}
	evenItem = suite.Item{ID: "k-even", Grader: suite.GraderCode, Prompt: "Write is_even(n).",
		Tests: "assert is_even(4)\nassert not is_even(3)\n"}
)

// anything is a class whose instances claim to equal everything.
const anything = "class Anything:\n" +
	"    def __eq__(self, other): return True\n" +
	"    def __ne__(self, other): return False\n" +
	"    __hash__ = object.__hash__\n"

// TestCodeHostileResults: a program whose function returns something
// other than the right built-in value, dressed up to pass `==` (or to
// make the grader believe its tests ran), scores 0 and says why; the
// suite's asserts are never evaluated by the program's objects. Each
// hostile program here scored 1 under the grader that appended the tests
// to main.py and let Python's `==` judge them (the exits and the printed
// mark already scored 0: they are here so that the table covers every
// shape).
func TestCodeHostileResults(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &sandbox.CodeGrader{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name   string
		item   suite.Item
		answer string
		// detail must be in the Detail.
		detail string
	}{
		{name: "__eq__ always True", item: addItem,
			answer: "class Yes:\n    def __eq__(self, other): return True\n\ndef add(a, b): return Yes()\n",
			detail: "got an object of class Yes, not a built-in value"},
		{name: "__ne__ always False", item: addItem,
			answer: anything + "def add(a, b): return Anything()\n",
			detail: "got an object of class Anything, not a built-in value"},
		{name: "int subclass overriding __eq__", item: addItem,
			answer: "class Int(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n\ndef add(a, b): return Int(0)\n",
			detail: "class Int (a subclass of int)"},
		{name: "str subclass overriding __eq__", item: wordItem,
			answer: "class Str(str):\n    def __eq__(self, other): return True\n    __hash__ = str.__hash__\n\ndef twice(w): return Str('no')\n",
			detail: "class Str (a subclass of str)"},
		{name: "list subclass overriding __eq__", item: scaleItem,
			answer: "class List(list):\n    def __eq__(self, other): return True\n\ndef scale(xs): return List()\n",
			detail: "class List (a subclass of list)"},
		{name: "float subclass overriding __eq__", item: halfItem,
			answer: "class Float(float):\n    def __eq__(self, other): return True\n    __hash__ = float.__hash__\n\ndef half(n): return Float(0)\n",
			detail: "class Float (a subclass of float)"},
		{name: "a list of objects equal to everything", item: scaleItem,
			answer: anything + "def scale(xs): return [Anything() for _ in xs]\n",
			detail: "got a list with, at [0], an object of class Anything, not a built-in value"},
		{name: "__hash__ trick: dict keys equal to any key", item: countItem,
			answer: anything + "class Key(Anything):\n    def __init__(self, h): self.h = h\n    def __hash__(self): return self.h\n\n" +
				"def count(s):\n    return {Key(hash(c)): Anything() for c in set(s)}\n",
			detail: "an object of class Key"},
		{name: "__repr__ and __str__ posing as the answer", item: addItem,
			answer: anything + "Anything.__repr__ = Anything.__str__ = lambda self: '5'\n\ndef add(a, b): return Anything()\n",
			detail: "got an object of class Anything, not a built-in value"},
		{name: "__bool__ that answers what each assert wants", item: evenItem,
			answer: "calls = []\nclass Flip:\n    def __bool__(self):\n        calls.append(1)\n        return len(calls) == 1\n\ndef is_even(n): return Flip()\n",
			detail: "got an object of class Flip, not a built-in value"},
		{name: "patches builtins.isinstance and type", item: addItem,
			answer: anything + "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: int\nbuiltins.issubclass = lambda *a: True\n\ndef add(a, b): return Anything()\n",
			detail: "not a built-in value"},
		{name: "patches json.dumps, repr and str", item: addItem,
			answer: anything + "import builtins, json\njson.dumps = lambda *a, **k: '5'\nbuiltins.repr = lambda *a: '5'\nbuiltins.str = lambda *a: '5'\n\ndef add(a, b): return Anything()\n",
			detail: "not a built-in value"},
		{name: "patches the comparison and encoding helpers it can reach", item: addItem,
			answer: anything + `import gc, operator, sys
def yes(*args, **kwargs): return True
operator.eq = operator.__eq__ = yes
helpers = ("canon", "eq", "compare", "check", "encode", "dump", "repr", "judge")
for o in gc.get_objects():
    if type(o) is type(yes) and o is not yes and any(h in o.__name__.lower() for h in helpers):
        try:
            o.__code__ = yes.__code__
        except Exception:
            pass
f = sys._getframe()
while f is not None:
    for k, v in list(f.f_globals.items()):
        if callable(v) and any(h in k.lower() for h in helpers):
            f.f_globals[k] = yes
    f = f.f_back

def add(a, b): return Anything()
`,
			detail: "tests failed"},
		{name: "reads its tests from main.py", item: addItem,
			answer: `import re
table = {}
for m in re.finditer(r"assert add\((.*?)\) == ([^,\n]+)", open(__file__).read()):
    table[m.group(1)] = int(m.group(2))

def add(a, b): return table["%d, %d" % (a, b)]
`,
			detail: "KeyError"},
		{name: "forges the harness's mark from its memory", item: addItem,
			answer: `import os, sys
def marks():
    f = sys._getframe()
    while f is not None:
        for space in (f.f_globals, f.f_locals):
            for v in list(space.values()):
                if isinstance(v, bytes) and v.startswith(b"lowbarena-done-"):
                    yield v
        f = f.f_back
for m in set(marks()):
    os.write(1, b"\n" + m + b" end\n" + b"\n" + m + b"\n")
os._exit(0)
`,
			detail: "the results are forged or malformed: the tests ended after 0 of 2 checks"},
		{name: "prints a fake PASS marker", item: addItem,
			answer: "import os\nprint('PASS')\nprint('all tests passed')\nprint('lowbarena-done-' + '0' * 32 + ' end', flush=True)\nos._exit(0)\n",
			detail: "tests did not run"},
		{name: "leaves with sys.exit(0) before the tests", item: addItem,
			answer: "import sys\ndef add(a, b): return 0\nsys.exit(0)\n", detail: "tests did not run"},
		{name: "leaves with os._exit(0) before the tests", item: addItem,
			answer: "import os\ndef add(a, b): return 0\nos._exit(0)\n", detail: "tests did not run"},
		{name: "leaves with os._exit(0) from the function under test", item: addItem,
			answer: "import os\ndef add(a, b): os._exit(0)\n", detail: "tests did not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := g.Grade(context.Background(), tc.item, tc.answer)
			require.NoError(t, err)
			t.Logf("%+v", res)
			require.Zero(t, res.Score, "a hostile program passed: %s", res.Detail)
			require.False(t, res.Empty)
			require.NotEmpty(t, res.Detail)
			require.Contains(t, res.Detail, tc.detail)
		})
	}
}

// shapesTests are checks of every kind and of every built-in type the
// grader compares, with setup statements between them.
const shapesTests = `assert pair() == (1, 'a', None)
assert nested() == [[1, 2], [3, [4, 5]], [], ()]
assert table() == {'a': 1, 'b': [2, 3], 'c': {'d': None}, 4: (5,)}
assert tenth() == 0.3
assert mean([1, 2, 3]) == 2
assert mean([1, 2]) == 1.5
assert nothing() is None
assert members() == {3, 1, 2}
assert empty() == set()
assert frozen() == frozenset({1, 2})
assert raw() == b'\x00\xff'
assert big() == 1267650600228229401496703205376
assert -big() == -1267650600228229401496703205376
assert is_even(4)
assert not is_even(3)
assert is_even(4) is True
assert greet('w\u00f6rld') == 'h\u00e9llo w\u00f6rld \u2603'
assert order() == {'b': 1, 'a': 2}
assert add(2, 3) != 6
assert nothing() is not True
xs = [3, 1, 2]
sort_in_place(xs)
assert xs == [1, 2, 3]
assert add(
    1,
    2,
) == 3, 'a check over several lines'
assert 5 == add(2, 3)  # the literal on the left
`

// shapesRight answers shapesTests; its functions print, to stdout and
// stderr, with and without a line's end.
const shapesRight = `import sys
def pair(): return (1, 'a', None)
def nested(): return [[1, 2], [3, [4, 5]], [], ()]
def table(): return {4: (5,), 'c': {'d': None}, 'b': [2, 3], 'a': 1}
def tenth(): return 0.1 + 0.2
def mean(xs): return sum(xs) / len(xs)
def nothing(): print('nothing to return')
def members(): return {1, 2, 3}
def empty(): return set()
def frozen(): return frozenset([2, 1])
def raw(): return bytes([0, 255])
def big(): return 2 ** 100
def is_even(n): return n % 2 == 0
def greet(w): return 'h\u00e9llo ' + w + ' \u2603'
def order(): return {'a': 2, 'b': 1}
def add(a, b):
    print('adding', a, b, end='')
    print('to stderr', file=sys.stderr)
    return a + b
def sort_in_place(xs): xs.sort()
print('the program ran', end='')
`

// TestCodeHonestResults: right programs pass, whatever the built-in type
// of their results, and wrong ones fail with the check, what their
// function returned and the assert's message.
func TestCodeHonestResults(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &sandbox.CodeGrader{Timeout: 5 * time.Second}
	shapes := suite.Item{ID: "k-shapes", Grader: suite.GraderCode, Prompt: "Write them all.", Tests: shapesTests}
	for _, tc := range []struct {
		name   string
		item   suite.Item
		answer string
		score  float64
		detail string
	}{
		{name: "every shape", item: shapes, answer: shapesRight, score: 1},
		{name: "a float within the tolerance", item: halfItem, answer: "def half(n): return n / 2 + 1e-12\n", score: 1},
		{name: "an int where a float is wanted", item: halfItem, answer: "def half(n): return n / 2 if n % 2 else n // 2\n", score: 1},
		{name: "a bool is true", item: evenItem, answer: "def is_even(n): return not n % 2\n", score: 1},
		{name: "wrong value", item: addItem, answer: "def add(a, b): return a - b\n",
			detail: "tests failed: AssertionError: add(2, 3) != 5 (line 1: assert add(2, 3) == 5: got -1)"},
		{name: "wrong value without a message", item: addItem, answer: "def add(a, b): return 5\n",
			detail: "tests failed: line 2: assert add(-1, 1) == 0: got 5"},
		{name: "a str for an int", item: addItem, answer: "def add(a, b): return str(a + b)\n",
			detail: "got '5'"},
		{name: "a tuple for a list", item: scaleItem, answer: "def scale(xs): return tuple(x * 2 for x in xs)\n",
			detail: "line 1: assert scale([1, 2, 3]) == [2, 4, 6]: got (2, 4, 6)"},
		{name: "a float beyond the tolerance", item: halfItem, answer: "def half(n): return n / 2 + 1e-6\n",
			detail: "got 1.500001"},
		{name: "an int for a bool", item: evenItem, answer: "def is_even(n): return 1 - n % 2\n",
			detail: "line 1: assert is_even(4): got 1"},
		{name: "a truthy list for True", item: evenItem, answer: "def is_even(n): return [n] if n % 2 == 0 else []\n",
			detail: "line 1: assert is_even(4): got [4]"},
		{name: "an error in the function", item: addItem, answer: "def add(a, b): return a + undefined\n",
			detail: "tests failed: NameError: name 'undefined' is not defined"},
		{name: "a cycle", item: scaleItem, answer: "def scale(xs):\n    xs.append(xs)\n    return xs\n",
			detail: "nested deeper than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := g.Grade(context.Background(), tc.item, tc.answer)
			require.NoError(t, err)
			t.Logf("%+v", res)
			require.Equal(t, tc.score, res.Score, res.Detail)
			require.Contains(t, res.Detail, tc.detail)
		})
	}
}

// TestCodeBadTests: tests the grader cannot judge without letting the
// program's objects take part refuse the item (grade.ErrBadItem), and the
// program does not run.
func TestCodeBadTests(t *testing.T) {
	needSandbox(t)
	t.Parallel()
	g := &sandbox.CodeGrader{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name, tests, message string
	}{
		{"an ordering", "assert add(2, 3) == 5\nassert add(2, 3) < 6\n", "line 2: assert add(2, 3) < 6: not a check"},
		{"no literal", "five = 5\nassert add(2, 3) == five\n", "line 2: assert add(2, 3) == five: neither side of == is a literal"},
		{"a chained comparison", "assert add(1, 1) == 2 == add(0, 2)\n", "line 1"},
		{"an unsupported literal", "assert add(2, 3) == 5j\n", "line 1: assert add(2, 3) == 5j: the literal"},
		{"no check", "print(add(2, 3))\n", "no check"},
		{"an assert in a loop", "for a in [1, 2]:\n    assert add(a, 0) == a\n", "line 1: an assert or raise inside a statement"},
		{"a raise", "if add(2, 3) != 5:\n    raise AssertionError('wrong')\n", "line 1: an assert or raise inside a statement"},
		{"a syntax error", "assert add(2, 3) == (\n", "SyntaxError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := addItem
			it.Tests = tc.tests
			res, err := g.Grade(context.Background(), it, "import sys\nprint('the program ran', file=sys.stderr)\ndef add(a, b): return a + b\n")
			require.ErrorIs(t, err, grade.ErrBadItem)
			require.ErrorContains(t, err, tc.message)
			require.NotContains(t, err.Error(), "the program ran")
			require.Equal(t, grade.Result{}, res)
		})
	}
}
