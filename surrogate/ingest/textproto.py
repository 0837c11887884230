"""A small reader of protocol-buffer text format (``.txtpb``) that needs no ``.proto`` file.

Text format is self-describing enough for reading: ``name: scalar``, ``name { ... }`` (or
``name: { ... }``, ``name < ... >``) and ``name: [a, b]``; a field may repeat. Without the
schema we cannot know which fields are repeated, so every field is kept as a list and the
caller asks for one value (:meth:`Message.one`) or all (:meth:`Message.all`). Scalars are
returned as int, float, bool (``true``/``false``), str (quoted strings, unescaped) or, for
enum names such as ``F32``, the bare identifier as str.

Reference: https://protobuf.dev/reference/protobuf/textformat-spec/
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from surrogate.errors import DataError
from surrogate.io.input_files import read_input_text

Scalar: TypeAlias = int | float | bool | str
Value: TypeAlias = "Scalar | Message"

_TOKEN = re.compile(
    r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+)
  | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fFuUlL]*)
  | (?P<ident>-?[A-Za-z_][\w.]*)
  | (?P<punct>[{}<>:\[\],;])
  | (?P<bad>.)
    """,
    re.VERBOSE,
)
_CLOSE = {"{": "}", "<": ">"}


@dataclass
class Message:
    """One message: its fields in order of appearance, each a list of values."""

    line: int
    """1-based line where the message starts (its opening brace; 1 for the file)."""
    fields: dict[str, list[Value]] = field(default_factory=dict)

    def all(self, name: str) -> list[Value]:
        """Every value of ``name`` (empty if absent)."""
        return self.fields.get(name, [])

    def one(self, name: str, default: Value | None = None) -> Value | None:
        """The last value of ``name`` (text format lets a later value override), or default."""
        vals = self.fields.get(name)
        return vals[-1] if vals else default

    def messages(self, name: str) -> list[Message]:
        """The sub-messages called ``name``."""
        return [v for v in self.all(name) if isinstance(v, Message)]


@dataclass
class _Tok:
    kind: str
    text: str
    line: int


def _tokenize(text: str, where: str) -> list[_Tok]:
    toks: list[_Tok] = []
    line = 1
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "bad"
        if kind == "nl":
            line += 1
        elif kind in ("ws", "comment"):
            continue
        elif kind == "bad":
            raise DataError(f"{where}:{line}: unexpected character {m.group()!r} in text proto")
        else:
            toks.append(_Tok(kind, m.group(), line))
    return toks


def _scalar(tok: _Tok, where: str) -> Scalar:
    if tok.kind == "str":
        try:
            return str(ast.literal_eval(tok.text))
        except (ValueError, SyntaxError) as e:
            raise DataError(f"{where}:{tok.line}: bad string literal {tok.text}: {e}") from e
    if tok.kind == "num":
        t = (
            tok.text.rstrip("fFuUlL")
            if not tok.text.lower().startswith(("0x", "-0x"))
            else tok.text.rstrip("uUlL")
        )
        try:
            return int(t, 0) if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", t) else float(t)
        except ValueError as e:
            raise DataError(f"{where}:{tok.line}: bad number {tok.text!r}") from e
    if tok.kind == "ident":
        low = tok.text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        if low in ("inf", "infinity", "-inf", "-infinity", "nan", "-nan"):
            return float(low.replace("infinity", "inf"))
        return tok.text
    raise DataError(f"{where}:{tok.line}: expected a value, got {tok.text!r}")


class _Parser:
    def __init__(self, toks: list[_Tok], where: str) -> None:
        self.toks = toks
        self.i = 0
        self.where = where

    def _peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _next(self, expect: str) -> _Tok:
        tok = self._peek()
        if tok is None:
            last = self.toks[-1].line if self.toks else 1
            raise DataError(
                f"{self.where}:{last}: text proto ends early, expected {expect} (truncated file?)"
            )
        self.i += 1
        return tok

    def message(self, line: int, close: str | None) -> Message:
        msg = Message(line=line)
        while True:
            tok = self._peek()
            if tok is None:
                if close is None:
                    return msg
                self._next(f"{close!r} closing the message opened at line {line}")
            assert tok is not None
            if close is not None and tok.text == close:
                self.i += 1
                return msg
            if tok.text in (",", ";"):
                self.i += 1
                continue
            name_tok = self._next("a field name")
            if name_tok.kind != "ident":
                raise DataError(
                    f"{self.where}:{name_tok.line}: expected a field name, got {name_tok.text!r}"
                )
            values = self._field_values()
            msg.fields.setdefault(name_tok.text, []).extend(values)

    def _field_values(self) -> list[Value]:
        tok = self._next("':' or '{' after a field name")
        if tok.text in _CLOSE:
            return [self.message(tok.line, _CLOSE[tok.text])]
        if tok.text != ":":
            raise DataError(
                f"{self.where}:{tok.line}: expected ':' or '{{' after a field name, "
                f"got {tok.text!r}"
            )
        tok = self._next("a value after ':'")
        if tok.text in _CLOSE:
            return [self.message(tok.line, _CLOSE[tok.text])]
        if tok.text == "[":
            out: list[Value] = []
            while True:
                t = self._next("a list element or ']'")
                if t.text == "]":
                    return out
                if t.text == ",":
                    continue
                out.append(
                    self.message(t.line, _CLOSE[t.text])
                    if t.text in _CLOSE
                    else _scalar(t, self.where)
                )
        value = _scalar(tok, self.where)
        # adjacent string literals concatenate ("a" "b" == "ab")
        while isinstance(value, str) and tok.kind == "str":
            nxt = self._peek()
            if nxt is None or nxt.kind != "str":
                break
            self.i += 1
            value += str(_scalar(nxt, self.where))
        return [value]


def parse_textproto(text: str, *, where: str = "<text>") -> Message:
    """Parse text-format protobuf; raises DataError with ``where:line`` on malformed input."""
    return _Parser(_tokenize(text, where), where).message(1, None)


def read_textproto(path: str | Path) -> Message:
    """Read and parse a ``.txtpb`` file."""
    p = Path(path)
    text = read_input_text(p, what="text proto", kind="table")
    return parse_textproto(text, where=str(p))
