"""SCIM filters (RFC 7644 §3.4.2.2) read into a tree: what `GET /Users?filter=...` and
`GET /Groups?filter=...` ask for, before quotas/scim_query.py turns the tree into a database
query for the attributes a resource has.

The grammar is RFC 7644's: comparisons `<attribute> <op> <value>` (eq ne co sw ew gt ge lt
le), `<attribute> pr`, `and`, `or`, `not (...)`, parentheses, and a multi-valued attribute's
value filter `emails[type eq "work"]` (also `emails[type eq "work"].value eq "..."`, as a
PATCH path writes it: one condition on the same value). `not` binds tightest, then `and`,
then `or`. Operators, `and`, `or`, `not`, `true`, `false` and `null` are read in any case
(ABNF's literals are); values are JSON's: strings in double quotes with JSON's escapes,
numbers, true, false, null.

A filter is bounded (MAX_CHARS, MAX_DEPTH, MAX_TERMS) so a hostile one costs little to
refuse and a read one is a small query. Whatever it cannot read is a `FilterError` naming
what is wrong and where: the HTTP side answers a 400 invalidFilter."""

import json
import re
from dataclasses import dataclass

MAX_CHARS = 4096  # a filter's length: room for some fifty names or'ed together
MAX_DEPTH = 10  # parentheses, `not`s and value filters within each other
MAX_TERMS = 64  # comparisons and `pr`s: each one a condition of the query, some a subquery
OPERATORS = ("eq", "ne", "co", "sw", "ew", "gt", "ge", "lt", "le")
KEYWORDS = {"true": True, "false": False, "null": None}
TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+)
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
      | (?P<word>\.?[A-Za-z$][A-Za-z0-9_:.$-]*)
      | (?P<mark>[()\[\]])""",
    re.VERBOSE,
)


class FilterError(ValueError):
    """A filter that cannot be read, or names what a resource has not: why, in a sentence."""


@dataclass(frozen=True)
class Token:
    kind: str  # string, number, word, mark or end
    text: str
    at: int  # its first character's position, from 1


@dataclass(frozen=True)
class Compare:
    """`<path> <op> <value>`: `op` in lower case, `value` a str, bool, number or None."""

    path: str
    op: str
    value: object


@dataclass(frozen=True)
class Present:
    """`<path> pr`: the attribute has a value."""

    path: str


@dataclass(frozen=True)
class Within:
    """`<path>[<filter>]`: one value of a multi-valued attribute meets the filter, whose
    paths are its sub-attributes."""

    path: str
    node: "Node"


@dataclass(frozen=True)
class Not:
    node: "Node"


@dataclass(frozen=True)
class Junction:
    """Its nodes joined by `op`, "and" or "or"."""

    op: str
    nodes: tuple["Node", ...]


Node = Compare | Present | Within | Not | Junction


def shown(token: Token) -> str:
    return "the end of the filter" if token.kind == "end" else f"{token.text[:40]!r}"


def tokens(written: str) -> list[Token]:
    """The filter's tokens, spaces dropped; a character no token begins with refused."""
    found, at = [], 0
    while at < len(written):
        match = TOKEN.match(written, at)
        if match is None:
            raise FilterError(unreadable(written, at))
        if match.lastgroup != "space":
            found.append(Token(match.lastgroup or "", match.group(), at + 1))
        at = match.end()
    return [*found, Token("end", "", len(written) + 1)]


def unreadable(written: str, at: int) -> str:
    if written[at] == '"':
        return f"The string at character {at + 1} is not closed."
    return f"Character {at + 1}, U+{ord(written[at]):04X}, begins nothing a filter holds."


def parse(written: str) -> Node:
    """The tree of a filter; a FilterError for one that cannot be read or is too big."""
    if len(written) > MAX_CHARS:
        raise FilterError(f"A filter has at most {MAX_CHARS} characters, not {len(written)}.")
    if not written.strip():
        raise FilterError("The filter is empty.")
    return Parser(tokens(written)).whole()


class Parser:
    """A recursive descent over the tokens, one method a rule of the grammar, its nesting and
    its comparisons counted."""

    def __init__(self, read: list[Token]):
        self.read, self.at, self.depth, self.terms = read, 0, 0, 0

    def whole(self) -> Node:
        node = self.disjunction()
        if self.peek().kind != "end":
            raise FilterError(f"Expected and, or or the end at character {self.peek().at}, "
                              f"not {shown(self.peek())}.")  # fmt: skip
        return node

    def peek(self) -> Token:
        return self.read[self.at]

    def take(self) -> Token:
        token = self.read[self.at]
        self.at += token.kind != "end"
        return token

    def keyword(self, *words: str) -> str | None:
        """The next token, taken, where it is one of `words` (in any case)."""
        token = self.peek()
        if token.kind == "word" and token.text.lower() in words:
            return self.take().text.lower()
        return None

    def mark(self, mark: str, after: str) -> None:
        token = self.take()
        if token.text != mark or token.kind != "mark":
            raise FilterError(f"Expected {mark!r} {after} at character {token.at}, not "
                              f"{shown(token)}.")  # fmt: skip

    def junction(self, op: str, part) -> Node:
        nodes = [part()]
        while self.keyword(op):
            nodes.append(part())
        return nodes[0] if len(nodes) == 1 else Junction(op, tuple(nodes))

    def disjunction(self) -> Node:
        return self.junction("or", self.conjunction)

    def conjunction(self) -> Node:
        return self.junction("and", self.unary)

    def nested(self, opening: str, closing: str, after: str) -> Node:
        """A filter within `opening` and `closing`, one level deeper."""
        at = self.peek().at
        self.mark(opening, after)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"A filter nests at most {MAX_DEPTH} deep.")
        node = self.disjunction()
        self.mark(closing, f"(closing the {opening!r} of character {at})")
        self.depth -= 1
        return node

    def unary(self) -> Node:
        token = self.peek()
        if token.kind == "mark" and token.text == "(":
            return self.nested("(", ")", "")
        if token.kind == "word" and token.text.lower() == "not":
            self.take()
            return Not(self.nested("(", ")", "after not"))
        return self.expression()

    def expression(self) -> Node:
        """`<path> pr`, `<path> <op> <value>` or `<path>[<filter>]` (and its `.sub`)."""
        path = self.path()
        if self.peek().text == "[" and self.peek().kind == "mark":
            return self.within(path)
        return self.condition(path)

    def path(self) -> str:
        token = self.take()
        if token.kind != "word" or token.text.startswith("."):
            raise FilterError(f"Expected an attribute at character {token.at}, not "
                              f"{shown(token)}.")  # fmt: skip
        return token.text

    def condition(self, path: str) -> Node:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise FilterError(f"A filter holds at most {MAX_TERMS} comparisons.")
        if self.keyword("pr"):
            return Present(path)
        op = self.keyword(*OPERATORS)
        if op is None:
            token = self.peek()
            raise FilterError(f"Expected an operator ({', '.join(OPERATORS)} or pr) after "
                              f"{path[:40]!r} at character {token.at}, not "
                              f"{shown(token)}.")  # fmt: skip
        return Compare(path, op, self.value())

    def within(self, path: str) -> Node:
        node = self.nested("[", "]", f"after {path[:40]!r}")
        token = self.peek()
        if token.kind == "word" and token.text.startswith("."):
            self.take()  # emails[type eq "work"].value eq "...": both on the same value
            node = Junction("and", (node, self.condition(token.text[1:])))
        return Within(path, node)

    def value(self) -> object:
        token = self.take()
        if token.kind == "word" and token.text.lower() in KEYWORDS:
            return KEYWORDS[token.text.lower()]
        if token.kind == "number":
            return json.loads(token.text)
        if token.kind == "string":
            return string(token)
        raise FilterError(f"Expected a value (a string in double quotes, true, false, null or a "
                          f"number) at character {token.at}, not {shown(token)}.")  # fmt: skip


def string(token: Token) -> str:
    """A string literal's value, its JSON escapes read; one PostgreSQL cannot hold refused."""
    try:
        value = json.loads(token.text)
    except ValueError:
        raise FilterError(f"The string at character {token.at} is no JSON string (a control "
                          f"character in it, or an escape JSON has not).") from None  # fmt: skip
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FilterError(f"The string at character {token.at} holds an unpaired "
                          f"surrogate.") from None  # fmt: skip
    if "\x00" in value:
        raise FilterError(f"The string at character {token.at} holds a NUL.")
    return value
