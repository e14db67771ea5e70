"""Is a file that the running Python rejects valid code for a newer Python?

Decided from the syntax, never from the file's name: the constructs a newer grammar added are
found by scanning the text (f-strings the way PEP 701 reads them) and by Python's tokenizer
(``type`` alias statements and generic definitions, PEP 695 / 696), rewritten into older syntax
that keeps every line where it was, and the rewritten text is parsed again. If it parses, the file
needs the newest Python among the constructs rewritten; if it still fails, the file has a real
syntax error, reported where the rewritten text fails (the line numbers are unchanged).

An f-string is accepted only if each of its replacement fields holds an expression that parses
(``f'{a +}'`` stays an error); the test runs on the expression with its own nested f-strings
rewritten the same way.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
import warnings
from typing import List, NamedTuple, Optional, Tuple

_PREFIX_CHARS = frozenset("rRbBuUfFtT")


class Newer(NamedTuple):
    """Constructs of a newer grammar found in a text: ``(version, what, line)`` each, and the text
    with them rewritten into syntax the running Python reads (same line numbers)."""

    constructs: List[Tuple[Tuple[int, int], str, int]]
    text: str


class _Malformed(Exception):
    """The scanner met text that no Python reads as a string: leave the error to the parser."""


def _parses(text: str, mode: str = "exec") -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text, mode=mode)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


class _Scanner:
    """Walks Python source, replacing every f-string by a plain string of the same line count."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.newer_lines: List[int] = []  # lines of f-strings the running Python rejects

    def line_at(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    # -- code ---------------------------------------------------------------------------------

    def code(self, in_field: bool = False) -> str:
        """Consume code up to the end (or, in a replacement field, up to the ``}``, ``!``, ``:``
        or ``=`` that ends its expression at bracket depth 0); return it rewritten."""
        text, out, depth = self.text, [], 0
        while self.pos < len(text):
            c = text[self.pos]
            if c == "#":
                end = text.find("\n", self.pos)
                end = len(text) if end < 0 else end
                out.append(text[self.pos:end])
                self.pos = end
                continue
            if c in "'\"" or (c in _PREFIX_CHARS and self._string_prefix_at(self.pos)):
                out.append(self.string())
                continue
            if in_field and depth == 0:
                two = text[self.pos:self.pos + 2]
                if two in ("!=", "==", "<=", ">="):
                    out.append(two)
                    self.pos += 2
                    continue
                if c in "}!:=":
                    return "".join(out)
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth < 0:
                    if in_field:
                        raise _Malformed
                    depth = 0
            if c.isalnum() or c == "_":  # a whole word at once (a prefix letter inside a name is no string)
                end = self.pos
                while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                    end += 1
                out.append(text[self.pos:end])
                self.pos = end
                continue
            out.append(c)
            self.pos += 1
        if in_field:
            raise _Malformed
        return "".join(out)

    def _string_prefix_at(self, pos: int) -> bool:
        text = self.text
        if pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] == "_"):
            return False
        end = pos
        while end < len(text) and end - pos < 3 and text[end] in _PREFIX_CHARS:
            end += 1
        return end < len(text) and text[end] in "'\""

    # -- strings ------------------------------------------------------------------------------

    def string(self) -> str:
        text, start = self.text, self.pos
        while text[self.pos] in _PREFIX_CHARS:
            self.pos += 1
        prefix = text[start:self.pos].lower()
        quote = text[self.pos:self.pos + 3] if text[self.pos:self.pos + 3] in ('"""', "'''") else text[self.pos]
        self.pos += len(quote)
        if "f" not in prefix:
            self._plain_body(quote)
            return text[start:self.pos]
        self._fstring_body(quote, raw="r" in prefix)
        literal = text[start:self.pos]
        if sys.version_info < (3, 12) and not _parses("(" + literal + ")", "eval"):
            self.newer_lines.append(self.line_at(start))
        return " '''" + "\n" * literal.count("\n") + "''' "

    def _plain_body(self, quote: str) -> None:
        text = self.text
        while True:
            if self.pos >= len(text):
                raise _Malformed
            if text.startswith(quote, self.pos):
                self.pos += len(quote)
                return
            c = text[self.pos]
            if c == "\\":
                self.pos += 2
                continue
            if c == "\n" and len(quote) == 1:
                raise _Malformed
            self.pos += 1

    def _fstring_body(self, quote: str, raw: bool, spec: bool = False) -> None:
        """The literal part of an f-string (or of a format spec when ``spec``: it ends at ``}``)."""
        text = self.text
        while True:
            if self.pos >= len(text):
                raise _Malformed
            if spec and text[self.pos] == "}":
                return
            if text.startswith(quote, self.pos):
                if spec:
                    raise _Malformed
                self.pos += len(quote)
                return
            c = text[self.pos]
            if c == "\\" and text[self.pos + 1:self.pos + 2] not in ("{", "}"):
                self.pos += 2
            elif c == "\n" and len(quote) == 1:
                raise _Malformed
            elif text.startswith("{{", self.pos) and not spec:
                self.pos += 2
            elif text.startswith("}}", self.pos) and not spec:
                self.pos += 2
            elif c == "{":
                self.pos += 1
                self._field(quote, raw)
            elif c == "}":
                raise _Malformed
            else:
                self.pos += 1

    def _field(self, quote: str, raw: bool) -> None:
        text = self.text
        expression = self.code(in_field=True)
        if not expression.strip() or not _parses("(" + expression + "\n)", "eval"):
            raise _Malformed
        if text.startswith("=", self.pos):  # f"{x=}"
            self.pos += 1
            while self.pos < len(text) and text[self.pos] in " \t":
                self.pos += 1
        if text.startswith("!", self.pos):
            self.pos += 1
            while self.pos < len(text) and text[self.pos].isalpha():
                self.pos += 1
        if text.startswith(":", self.pos):
            self.pos += 1
            self._fstring_body(quote, raw, spec=True)
        if not text.startswith("}", self.pos):
            raise _Malformed
        self.pos += 1


def _rewrite_fstrings(text: str) -> Optional[Tuple[str, List[int]]]:
    scanner = _Scanner(text)
    try:
        rewritten = scanner.code()
    except (_Malformed, IndexError, RecursionError):
        return None
    return rewritten, scanner.newer_lines


def _rewrite_type_params(text: str) -> Tuple[str, List[Tuple[Tuple[int, int], str, int]]]:
    """Rewrite ``type X = ...`` statements and ``def f[T]`` / ``class C[T]`` headers (PEP 695,
    PEP 696 defaults) into older syntax, found by the tokenizer; the line layout is kept."""
    if sys.version_info >= (3, 12):
        return text, []
    tokens: list = []
    try:  # the tokens up to a tokenizer error are kept: the constructs before a broken line count
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            tokens.append(tok)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    lines = text.split("\n")
    cuts: List[Tuple[int, int, int]] = []  # (line, start col, end col) to delete, on one line
    found: List[Tuple[Tuple[int, int], str, int]] = []
    significant = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    for i, tok in enumerate(significant[:-2]):
        before = significant[i - 1] if i else None
        at_start = before is None or before.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) or (
            before.type == tokenize.OP and before.string == ";")
        name, after = significant[i + 1], significant[i + 2]
        if tok.type != tokenize.NAME or name.type != tokenize.NAME:
            continue
        if tok.string == "type" and at_start and after.type == tokenize.OP and after.string in ("=", "["):
            cuts.append((tok.start[0], tok.start[1], name.start[1]))
            found.append(((3, 12), "a type alias statement (PEP 695)", tok.start[0]))
            if after.string == "[":
                end = _closing(significant, i + 2)
                if end is not None and _has_default(significant, i + 2, end):
                    found.append(((3, 13), "a type parameter default (PEP 696)", tok.start[0]))
        elif tok.string in ("def", "class") and after.type == tokenize.OP and after.string == "[":
            end = _closing(significant, i + 2)
            if end is None or significant[end].start[0] != after.start[0]:
                continue
            cuts.append((after.start[0], after.start[1], significant[end].end[1]))
            found.append(((3, 12), "a generic function or class (PEP 695)", tok.start[0]))
            if _has_default(significant, i + 2, end):
                found.append(((3, 13), "a type parameter default (PEP 696)", tok.start[0]))
    for line, start, end in sorted(cuts, reverse=True):
        source = lines[line - 1]
        lines[line - 1] = source[:start] + source[end:]
    return "\n".join(lines), found


def _closing(tokens: list, open_index: int) -> Optional[int]:
    depth = 0
    for j in range(open_index, len(tokens)):
        t = tokens[j]
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return None


def _has_default(tokens: list, open_index: int, close_index: int) -> bool:
    depth = 0
    for t in tokens[open_index:close_index]:
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
        elif depth == 1 and t.type == tokenize.OP and t.string == "=":
            return True
    return False


def newer_constructs(text: str) -> Optional[Newer]:
    """The newer-grammar constructs of ``text`` and the text rewritten without them, or None when
    it holds none (or the scan met text no Python reads as strings).

    >>> n = newer_constructs('x = f"{d["k"]}"\\ny = 1\\n')
    >>> sys.version_info >= (3, 12) or (n.constructs[0][0], n.constructs[0][2], n.text.count("\\n")) == ((3, 12), 1, 2)
    True
    >>> sys.version_info >= (3, 12) or newer_constructs("x = f'{a +}'\\n") is None  # a field that never parses
    True
    """
    if sys.version_info >= (3, 12):
        return None
    rewritten = _rewrite_fstrings(text)
    constructs: List[Tuple[Tuple[int, int], str, int]] = []
    if rewritten is not None:
        text_without, fstring_lines = rewritten
        constructs += [((3, 12), "an f-string that only PEP 701 reads (quotes, backslashes, comments or line "
                        "breaks inside its replacement fields)", line) for line in fstring_lines]
    else:
        text_without = text
    text_without, type_params = _rewrite_type_params(text_without)
    constructs += type_params
    if not constructs:
        return None
    return Newer(constructs, text_without)
