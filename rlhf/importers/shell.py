"""Enough of bash to read a training script without running it: the commands it would run, their words after
quoting and variable expansion.

Understood: line continuations, comments, '...', "...", $'...' (ANSI-C escapes), ``NAME=value``, ``export
NAME=value``, arrays ``NAME=( ... )`` (comments and newlines inside) and their use as ``${NAME[@]}``, ``$NAME``,
``${NAME}``, ``${NAME:-default}``, word splitting of unquoted expansions, heredocs, and ``read -r -d '' NAME <<EOF``
(OpenRLHF's older scripts keep their command in a variable this way). Not run: command substitutions ``$(...)``
and backquotes, variables the script never sets and its own arguments (``$@``, ``$1``) stay as written and are
listed per word in :attr:`Command.unknown` (``$HOME`` becomes ``~`` and ``$(pwd)`` ``.``, which mean the same
where the recipe runs); control flow (if/for) is read as a plain sequence of commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlhf.errors import UserError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPERATORS = ";&|()<>"
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time", "exec"}
_BUILTIN_ASSIGN = {"export", "declare", "local", "readonly", "typeset"}
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}


class ShellSyntaxError(UserError):
    """The script cannot be read (an unterminated quote, a heredoc without its end line)."""


@dataclass
class _Part:
    kind: str  # lit | var | sub | arith
    text: str = ""  # lit: the text; var: the name; sub: the command text
    quoted: bool = False
    index: str | None = None  # var: "@", "*", or an element number
    default: str | None = None  # var: ${NAME:-default}


@dataclass
class _Word:
    parts: list[_Part]
    line: int


@dataclass
class _Array:
    name: str
    items: list[_Word]
    append: bool
    line: int


@dataclass
class _RawCommand:
    items: list[_Word | _Array] = field(default_factory=list)
    line: int = 0
    heredocs: list[tuple[str, bool]] = field(default_factory=list)  # (body, expand)


@dataclass
class Command:
    """One command the script runs, as the words it would pass (after expansion)."""

    words: list[str]
    line: int  # where it starts, 1-based
    # Word index -> the pieces of that word this reading cannot know, as written: ${SAVE_PATH} (set outside the
    # script), $(...) and `...` (command substitutions), $@ / ${1} (the script's own arguments). The word itself
    # keeps them as written: '${SAVE_PATH}/ckpt'.
    unknown: dict[int, tuple[str, ...]] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)  # variables used but never set in the script


def _special(c: str) -> bool:
    """$@, $*, $1 ...: the script's own arguments and bash's special parameters."""
    return bool(c) and c in "0123456789@*#?$!"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.line = 1

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def take(self) -> str:
        c = self.s[self.i]
        self.i += 1
        if c == "\n":
            self.line += 1
        return c

    def error(self, what: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"line {self.line}: {what}")

    # -- commands -------------------------------------------------------------------------------------------------

    def commands(self) -> list[_RawCommand]:
        out: list[_RawCommand] = []
        cur = _RawCommand(line=self.line)
        pending: list[tuple[str, bool, bool]] = []  # heredoc delimiters waiting for the next line
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t":
                self.take()
            elif c == "\\" and self.peek(1) == "\n":
                self.take(), self.take()
            elif c == "#":
                while self.i < len(self.s) and self.peek() != "\n":
                    self.take()
            elif c == "\n":
                self.take()
                for delim, strip_tabs, expand in pending:
                    cur.heredocs.append((self._heredoc_body(delim, strip_tabs), expand))
                pending = []
                cur = self._end(out, cur)
            elif c == "<" and self.peek(1) == "<" and self.peek(2) != "<":
                self.take(), self.take()
                strip_tabs = self.peek() == "-"
                if strip_tabs:
                    self.take()
                self._skip_blanks()
                word = self._word()
                if word is None:
                    raise self.error("<< needs a delimiter word")
                delim = "".join(p.text for p in word.parts)
                pending.append((delim, strip_tabs, not any(p.quoted for p in word.parts)))
            elif c in "<>":
                self.take()
                if self.peek() in "<>&":
                    self.take()
                self._skip_blanks()
                self._word()  # the redirection target: not part of the command
            elif c in _OPERATORS:
                self.take()
                if self.peek() == c and c in "&|":
                    self.take()
                cur = self._end(out, cur)
            else:
                start = self.line
                word = self._word()
                if word is None:
                    continue
                m = _ASSIGN.fullmatch(_literal(word) or "")
                if m and self.peek() == "(":
                    self.take()
                    cur.items.append(_Array(m.group(1), self._array_items(), bool(m.group(2)), start))
                else:
                    if not cur.items:
                        cur.line = start
                    cur.items.append(word)
        self._end(out, cur)
        return out

    def _end(self, out: list[_RawCommand], cur: _RawCommand) -> _RawCommand:
        if cur.items or cur.heredocs:
            out.append(cur)
        return _RawCommand(line=self.line)

    def _skip_blanks(self) -> None:
        while self.peek() in (" ", "\t"):
            self.take()

    def _heredoc_body(self, delim: str, strip_tabs: bool) -> str:
        lines = []
        while True:
            if self.i >= len(self.s):
                raise self.error(f"heredoc ended without its closing line {delim!r}")
            end = self.s.find("\n", self.i)
            end = len(self.s) if end < 0 else end
            raw = self.s[self.i : end]
            self.i = min(end + 1, len(self.s))
            self.line += 1
            line = raw.lstrip("\t") if strip_tabs else raw
            if line == delim:
                return "\n".join(lines) + ("\n" if lines else "")
            lines.append(line)

    def _array_items(self) -> list[_Word]:
        items = []
        while True:
            c = self.peek()
            if not c:
                raise self.error("array ( ... ) is never closed")
            if c in " \t\n":
                self.take()
            elif c == "\\" and self.peek(1) == "\n":
                self.take(), self.take()
            elif c == "#":
                while self.peek() and self.peek() != "\n":
                    self.take()
            elif c == ")":
                self.take()
                return items
            else:
                word = self._word()
                if word is not None:
                    items.append(word)

    # -- words ----------------------------------------------------------------------------------------------------

    def _word(self) -> _Word | None:
        parts: list[_Part] = []
        start = self.line
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\n" or c in _OPERATORS:
                break
            if c == "\\":
                self.take()
                nxt = self.take() if self.i < len(self.s) else ""
                if nxt != "\n":
                    parts.append(_Part("lit", nxt, quoted=True))
            elif c == "'":
                self.take()
                parts.append(_Part("lit", self._until("'"), quoted=True))
            elif c == "$" and self.peek(1) == "'":
                self.take(), self.take()
                parts.append(_Part("lit", self._ansi_c(), quoted=True))
            elif c == '"':
                self.take()
                parts.extend(self._double_quoted())
            elif c == "$":
                parts.append(self._dollar(quoted=False))
            elif c == "`":
                self.take()
                parts.append(_Part("sub", "`" + self._until("`") + "`"))
            else:
                self.take()
                if parts and parts[-1].kind == "lit" and not parts[-1].quoted:
                    parts[-1].text += c  # one part per run of plain text: NAME= stays recognisable
                else:
                    parts.append(_Part("lit", c))
        if self.peek() in ("<", ">") and (_literal(_Word(parts, start)) or "x").isdigit():
            return None  # a file descriptor of a redirection (2>&1), not a word
        return _Word(parts, start) if parts else None

    def _until(self, end: str) -> str:
        j = self.s.find(end, self.i)
        if j < 0:
            raise self.error(f"unterminated {end}")
        text = self.s[self.i : j]
        self.line += text.count("\n")
        self.i = j + 1
        return text

    def _braced(self) -> str:
        """The body of ``${...}`` up to its own closing brace: ``${A:-"${HOME}/x"}`` nests braces and quotes."""
        start, depth, quote = self.i, 0, ""
        while self.i < len(self.s):
            c = self.take()
            if c == "\\" and quote != "'" and self.i < len(self.s):
                self.take()
            elif quote:
                quote = "" if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c == "{":
                depth += 1
            elif c == "}":
                if depth == 0:
                    return self.s[start : self.i - 1]
                depth -= 1
        raise self.error("unterminated }")

    def _ansi_c(self) -> str:
        out = []
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated $'")
            c = self.take()
            if c == "'":
                return "".join(out)
            if c != "\\":
                out.append(c)
                continue
            e = self.take()
            if e in _ANSI_C:
                out.append(_ANSI_C[e])
            elif e == "x":
                digits = ""
                while len(digits) < 2 and self.peek() and self.peek() in "0123456789abcdefABCDEF":
                    digits += self.take()
                out.append(chr(int(digits, 16)) if digits else "\\x")
            else:
                out.append(e)  # \\ \' \" and anything else: the character itself

    def _double_quoted(self) -> list[_Part]:
        parts: list[_Part] = [_Part("lit", "", quoted=True)]  # "" is still a (possibly empty) word
        while True:
            if self.i >= len(self.s):
                raise self.error('unterminated "')
            c = self.peek()
            if c == '"':
                self.take()
                return parts
            if c == "\\" and self.peek(1) in '$`"\\\n':
                self.take()
                e = self.take()
                if e != "\n":
                    parts.append(_Part("lit", e, quoted=True))
            elif c == "$" and (
                self.peek(1) in ("{", "(") or _NAME.match(self.peek(1) or "-") or _special(self.peek(1))
            ):
                parts.append(self._dollar(quoted=True))
            elif c == "`":
                self.take()
                parts.append(_Part("sub", "`" + self._until("`") + "`", quoted=True))
            else:
                parts.append(_Part("lit", self.take(), quoted=True))

    def _dollar(self, quoted: bool) -> _Part:
        self.take()  # $
        c = self.peek()
        if c == "(":
            depth, start = 0, self.i
            while self.i < len(self.s):
                ch = self.take()
                depth += ch == "("
                depth -= ch == ")"
                if depth == 0:
                    text = "$" + self.s[start : self.i]
                    if text.startswith("$((") and text.endswith("))"):
                        return _Part("arith", text, quoted=quoted)  # $(( ... )): arithmetic, evaluated if it can be
                    return _Part("sub", text, quoted=quoted)
            raise self.error("unterminated $(")
        if c == "{":
            self.take()
            body = self._braced()
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(?:\[([^\]]*)\])?(?::?[-=](.*))?", body, re.S)
            if m is None:
                return _Part("sub", "${" + body + "}", quoted=quoted)
            return _Part("var", m.group(1), quoted, index=m.group(2), default=m.group(3))
        m = _NAME.match(self.s, self.i)
        if m:
            self.i = m.end()
            return _Part("var", m.group(0), quoted)
        if c and c in "0123456789@*#?$!":
            self.take()
            return _Part("var", c, quoted)
        return _Part("lit", "$", quoted)


class _Unknown(str):
    """Text this reading cannot know (a command substitution, a variable set outside the script, the script's own
    arguments), kept as written; ``sources`` are those pieces as written (``${SAVE_PATH}``, ``$(pwd)``, ``$@``).

    Internal to this module: :func:`parse_script` hands out plain ``str`` words and the sources per word
    (:attr:`Command.unknown`), so nothing downstream (a recipe, OmegaConf) ever sees this class."""

    sources: tuple[str, ...] = ()


def _unknown(text: str, sources: tuple[str, ...]) -> str:
    kept = tuple(dict.fromkeys(s for s in sources if s in text))
    if not kept:
        return str(text)
    u = _Unknown(text)
    u.sources = kept
    return u


def _sources(*texts: str) -> tuple[str, ...]:
    return tuple(s for t in texts if isinstance(t, _Unknown) for s in t.sources)


def _join(texts: list[str], sep: str = "") -> str:
    return _unknown(sep.join(texts), _sources(*texts))


def _split_outside(text: str) -> list[str]:
    """Whitespace word splitting that never cuts inside an unknown piece (``$(date +%Y)`` stays one)."""
    protected = [False] * len(text)
    for s in _sources(text):
        start = text.find(s)
        while start >= 0:
            for k in range(start, start + len(s)):
                protected[k] = True
            start = text.find(s, start + len(s))
    pieces, cur = [], []
    for k, ch in enumerate(text):
        if ch.isspace() and not protected[k]:
            if cur:
                pieces.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        pieces.append("".join(cur))
    return [_unknown(p, _sources(text)) for p in pieces]


def _integer_arithmetic(expr: str) -> int | None:
    """An integer expression of + - * / % and parentheses (bash's division truncates toward zero); None when it is
    anything else (a name left unset, a comparison, a shift)."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if type(node.op) in ops:
                return ops[type(node.op)](a, b)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b != 0:
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
                return q if not isinstance(node.op, ast.Mod) else a - q * b
        raise ValueError(expr)

    try:
        return ev(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _literal(word: _Word) -> str | None:
    """The word's text when it is plain literal text (no expansion), else None."""
    if all(p.kind == "lit" for p in word.parts):
        return "".join(p.text for p in word.parts)
    return None


# What these expand to in the place the recipe runs, rather than where the script ran: paths under the home folder
# stay under the user's home (~ is expanded by rlhf), and the working directory is the one rlhf-run starts in.
_PORTABLE = {"HOME": "~", "PWD": "."}
_PWD_SUBSTITUTIONS = ("$(pwd)", "`pwd`")


class _Expander:
    def __init__(self, env: dict[str, str | list[str]]) -> None:
        self.vars: dict[str, str | list[str]] = dict(env)
        self.unset: list[str] = []

    def value(self, part: _Part) -> str | list[str]:
        v = self.vars.get(part.text)
        if v is None or v == "" or v == []:
            if part.default is not None:
                return self.default_word(part.default)
            if v is not None:
                return ""  # set to the empty string in the script: bash's empty expansion
            if part.text in _PORTABLE and part.index is None:
                return _PORTABLE[part.text]
            if _NAME.fullmatch(part.text) and part.text not in self.unset:
                self.unset.append(part.text)
            written = (
                f"${part.text}" if part.text in "@*" else f"${{{part.text}{f'[{part.index}]' if part.index else ''}}}"
            )
            return _unknown(written, (written,))
        if isinstance(v, list):
            if part.index in ("@", "*"):
                return list(v)
            if part.index and part.index.isdigit():
                k = int(part.index)
                return v[k] if k < len(v) else ""
            return v[0] if v else ""
        return v

    def string(self, text: str) -> str:
        """Expand $NAME / ${...} inside a heredoc body or a ${VAR:-default}: one string, no word splitting."""
        lexer = _Lexer(text.replace("\\\n", ""))
        out: list[str] = []
        while lexer.i < len(lexer.s):
            if lexer.peek() == "$" and lexer.peek(1) not in ("", " ", "\n", "'"):
                out.append(self._as_text(lexer._dollar(quoted=True)))
            else:
                out.append(lexer.take())
        return _join(out)

    def default_word(self, text: str) -> str:
        """The ``word`` of ``${VAR:-word}``: quotes removed and expansions made, as bash does; no word splitting."""
        lexer = _Lexer(text)
        out: list[str] = []
        while lexer.i < len(lexer.s):
            word = lexer._word()
            if word is None:
                out.append(lexer.take())  # a blank or an operator character: kept as it is
                continue
            out.extend(self._as_text(p) if p.kind != "lit" else p.text for p in word.parts)
        return _join(out)

    def arithmetic(self, text: str) -> str:
        """``$(( expr ))`` as bash computes it (integers), with variables set in the script; else unknown."""
        expr = text[3:-2]

        def name(m: re.Match[str]) -> str:
            v = self.vars.get(m.group(1) or m.group(2))
            return str(v) if isinstance(v, str) and not isinstance(v, _Unknown) and v.strip() else m.group(0)

        expr = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?|\b([A-Za-z_][A-Za-z0-9_]*)\b", name, expr)
        value = _integer_arithmetic(expr)
        return str(value) if value is not None else _unknown(text, (text,))

    def _as_text(self, part: _Part) -> str:
        if part.kind == "arith":
            return self.arithmetic(part.text)
        if part.kind == "sub":
            if part.text in _PWD_SUBSTITUTIONS:
                return "."
            return _unknown(part.text, (part.text,))
        if part.kind == "lit":
            return part.text
        v = self.value(part)
        return _join(v, " ") if isinstance(v, list) else v

    def fields(self, word: _Word) -> list[str]:
        out: list[str] = []
        cur: str | None = None

        def cat(text: str) -> None:
            nonlocal cur
            cur = text if cur is None else _join([cur, text])

        def flush() -> None:
            nonlocal cur
            if cur is not None:
                out.append(cur)
            cur = None

        def add_split(text: str) -> None:
            if isinstance(text, _Unknown) and text in text.sources:
                cat(text)  # what a substitution would print, or a variable set elsewhere: one word, unknown here
                return
            pieces = _split_outside(text)
            if not pieces:
                if text:  # only blanks: a field boundary
                    flush()
                return
            if text[0].isspace():
                flush()
            cat(pieces[0])
            for piece in pieces[1:]:
                flush()
                cat(piece)
            if text[-1].isspace():
                flush()

        for part in word.parts:
            if part.kind == "lit":
                cat(part.text)
            elif part.kind in ("sub", "arith"):
                cat(self._as_text(part))
            else:
                v = self.value(part)
                if isinstance(v, list):
                    for k, item in enumerate(v):
                        if k:
                            flush()
                        if part.quoted:
                            cat(item)
                        else:
                            add_split(item)
                elif part.quoted:
                    cat(v)
                else:
                    add_split(v)
        flush()
        return out


def parse_script(text: str, env: dict[str, str] | None = None) -> list[Command]:
    """The commands ``text`` would run, in order, with variables set earlier in it expanded."""
    ex = _Expander(env or {})
    commands: list[Command] = []
    for raw in _Lexer(text).commands():
        ex.unset = []
        items = list(raw.items)
        words: list[str] = []
        assigning = True
        for item in items:
            if isinstance(item, _Array):
                values = [f for w in item.items for f in ex.fields(w)]
                old = ex.vars.get(item.name)
                base = (old if isinstance(old, list) else [old] if old else []) if item.append else []
                ex.vars[item.name] = base + values
                continue
            lit_head = item.parts[0].text if item.parts and item.parts[0].kind == "lit" else ""
            m = _ASSIGN.match(lit_head) if assigning and not item.parts[0].quoted else None
            if m:
                rest = _Word([_Part("lit", lit_head[m.end() :])] + item.parts[1:], item.line)
                value = _join([ex._as_text(p) for p in rest.parts])
                if m.group(2):
                    old = ex.vars.get(m.group(1), "")
                    value = _join([_join(old, " ") if isinstance(old, list) else old, value])
                ex.vars[m.group(1)] = value
                continue
            assigning = False
            words.extend(ex.fields(item))
        while words and words[0] in _KEYWORDS:
            words.pop(0)
        if words and words[0] in _BUILTIN_ASSIGN:
            for w in words[1:]:
                m = _ASSIGN.match(w)
                if m:
                    ex.vars[m.group(1)] = _unknown(w[m.end() :], _sources(w))
            continue
        if words and words[0] == "read" and raw.heredocs:
            name = next((w for w in reversed(words[1:]) if _NAME.fullmatch(w)), None)
            body, expand = raw.heredocs[0]
            if name:
                ex.vars[name] = ex.string(body) if expand else body
            continue
        if words:
            unknown = {i: w.sources for i, w in enumerate(words) if isinstance(w, _Unknown)}
            commands.append(Command([str(w) for w in words], raw.line, unknown, list(ex.unset)))
    return commands
