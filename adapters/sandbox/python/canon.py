# The canonical encoding of a built-in value, shared by the prelude (the
# suite's expected values) and the harness (what the program's function
# returned). It is built before any program runs and keeps its own
# references to what it uses, so that a program that later replaces a
# builtin (type, isinstance, repr, json.dumps) changes nothing here. It
# looks at a value only through `type(x) is T`, never isinstance, and calls
# no method a program can override: the C methods of the exact built-in
# types alone. Anything else (a subclass of a built-in type included) is
# refused with the reason.
#
#   None        N            True, False   T, F
#   int         i<hex>;      float         f<repr>; (0.0 for either zero)
#   str         s<utf-8 as hex>;           bytes  b<hex>;
#   list        l<n>;<items>               tuple  t<n>;<items>
#   set         S<n>;<items>               frozenset  Z<n>;<items>
#   dict        d<n>;<key><value>...
#
# The reader (sandbox/value.go) orders the members of a set and the items
# of a dict itself.


def _canon_maker(max_bytes, max_depth):
    _type = type
    _bool, _int, _float, _str, _bytes = bool, int, float, str, bytes
    _list, _tuple, _dict, _set, _frozenset = list, tuple, dict, set, frozenset
    _len = len
    _int_format = int.__format__
    _float_repr = float.__repr__
    _float_eq = float.__eq__
    _str_encode = str.encode
    _str_repr = str.__repr__
    _bytes_hex = bytes.hex
    _dict_items = dict.items
    _join = "".join
    _type_name = type.__dict__["__name__"].__get__
    _type_mro = type.__dict__["__mro__"].__get__
    _exception = Exception
    builtin = (_bool, _int, _float, _str, _bytes, _list, _tuple, _dict, _set, _frozenset)
    tags = {_list: "l", _tuple: "t", _set: "S", _frozenset: "Z"}

    class Refused(_exception):
        pass

    def what(x):
        # The class of x, and the built-in type it derives from, read
        # through type's own descriptors.
        t = _type(x)
        try:
            name = _type_name(t)
            if _type(name) is not _str:
                name = "?"
            base = ""
            for b in _type_mro(t)[1:]:
                for a in builtin:
                    if b is a:
                        base = _type_name(a)
                        break
                if base:
                    break
        except _exception:
            name, base = "?", ""
        if base:
            return "an object of class " + name + " (a subclass of " + base + ")"
        return "an object of class " + name

    def refuse(x, path, outer):
        reason = what(x) + ", not a built-in value (None, bool, int, float, str, bytes, list, tuple, dict, set or frozenset)"
        if path:
            reason = "a " + outer + " with, at " + _join(path) + ", " + reason
        raise Refused(reason)

    def canon(x):
        out = []
        size = [0]
        path = []
        outer = [""]

        def put(s):
            size[0] += _len(s)
            if size[0] > max_bytes:
                raise Refused("a value over %d bytes once encoded" % max_bytes)
            out.append(s)

        def enc(x, depth):
            if depth > max_depth:
                raise Refused("a value nested deeper than %d levels (a cycle?)" % max_depth)
            t = _type(x)
            if x is None:
                put("N")
            elif t is _bool:
                put("T" if x is True else "F")
            elif t is _int:
                put("i" + _int_format(x, "x") + ";")
            elif t is _float:
                put("f" + ("0.0" if _float_eq(x, 0.0) else _float_repr(x)) + ";")
            elif t is _str:
                put("s" + _bytes_hex(_str_encode(x, "utf-8", "surrogatepass")) + ";")
            elif t is _bytes:
                put("b" + _bytes_hex(x) + ";")
            elif t is _list or t is _tuple or t is _set or t is _frozenset:
                if depth == 0:
                    outer[0] = _type_name(t)
                put(tags[t] + _int_format(_len(x), "d") + ";")
                i = 0
                for y in x:
                    path.append("[" + _int_format(i, "d") + "]" if t is _list or t is _tuple else "(a member)")
                    enc(y, depth + 1)
                    path.pop()
                    i += 1
            elif t is _dict:
                if depth == 0:
                    outer[0] = "dict"
                put("d" + _int_format(_len(x), "d") + ";")
                for k, v in _dict_items(x):
                    path.append("(a key)")
                    enc(k, depth + 1)
                    path.pop()
                    kt = _type(k)
                    path.append("[" + (_str_repr(k) if kt is _str else _int_format(k, "d") if kt is _int else "...") + "]")
                    enc(v, depth + 1)
                    path.pop()
            else:
                refuse(x, path, outer[0])

        enc(x, 0)
        return _join(out)

    return canon, Refused
