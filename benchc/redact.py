"""Keep secrets out of every plan, result and log line benchc writes.

Two tools. By name: the values of fields known to hold a credential are replaced with
`***` -- api keys, header values of credential-like headers, user:password in URLs,
credential-like query parameters, values of credential-like environment variables
(in `env:` and as `NAME=value` words of a command), and the argument after a
credential-like command-line flag (`--api-key X`, `--hf-token=X`).

By value: a Scrubber knows every secret value of a run (what the by-name rules hide,
collected once, see Scrubber.of) and replaces it wherever it turns up in free text, such
as an error body in which a gateway echoes the request's headers, or a server's log.
`scrubbing(s)` makes `s` the active scrubber of the current context (a `benchc run`), and
every document results.document.write_atomic writes passes through it.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

REDACTED = "***"
# Characters a reader keeps past the bound it will show (KEEP_PAST_CUT): a secret across the
# bound is then whole when clip() scrubs it (a key, escaped or percent-encoded, is far shorter)
KEEP_PAST_CUT = 512
_SECRET_WORDS = "auth|key|token|secret|password|passwd|cookie|credential"
_SECRET_NAME = re.compile(rf"({_SECRET_WORDS})", re.I)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_URL_USERINFO = re.compile(r"(://)[^/\s@]+@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in headers.items()}


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_url(url: str) -> str:
    """Drop user:password and credential-like query values from a URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL at all (an unclosed IPv6 bracket): hide what may be userinfo
        return _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        query = urlencode([(k, REDACTED if is_secret_name(k) else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_argv(argv: list[str]) -> list[str]:
    """`--api-key X` -> `--api-key ***`, `--token=X` -> `--token=***`, `HF_TOKEN=X` ->
    `HF_TOKEN=***` (as `env HF_TOKEN=X cmd` writes it), in argv or a shell line."""
    out: list[str] = []
    hide_next = False
    for i, arg in enumerate(argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif _is_shell_line(argv, i):
            out.append(redact_shell_line(arg))
        elif arg.startswith("-") and is_secret_name(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
        elif (m := _ASSIGNMENT.match(arg)) and is_secret_name(m.group(1)):
            out.append(f"{m.group(1)}={REDACTED}")
        else:
            out.append(_URL_USERINFO.sub(rf"\g<1>{REDACTED}@", arg))
    return out


def _is_shell_line(argv: list[str], i: int) -> bool:
    """The argument of `sh -c` (how a string server.command runs), or any argument with
    blanks in it that is not a NAME=value of `env`."""
    arg = argv[i]
    if i and argv[i - 1] == "-c":
        return True
    return any(c in arg for c in " \t\n") and not _ASSIGNMENT.match(arg)


_SHELL_FLAG = re.compile(
    rf"(--?[\w-]*(?:{_SECRET_WORDS})[\w-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)", re.I)  # the same words
# NAME=value as a word of its own (a shell assignment, or an argument of `env`)
_SHELL_ASSIGNMENT = re.compile(r"(?<![\w./-])([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S*)")


def redact_shell_line(line: str) -> str:
    line = _SHELL_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", line)
    line = _SHELL_ASSIGNMENT.sub(
        lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0), line)
    return _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", line)


def redact_text(text: str, secrets: list[str]) -> str:
    """Replace every known secret value inside free text (log lines, error bodies)."""
    return Scrubber(secrets).text(text)


# --------------------------------------------------------------------------- by value


def _argv_secrets(argv: Iterable[str]) -> list[str]:
    """Values the by-name rules hide in a command: flag arguments and NAME=value words,
    also inside a shell string."""
    argv = list(argv)
    words: list[str] = []
    for i, arg in enumerate(argv):
        if _is_shell_line(argv, i):
            lexer = shlex.shlex(arg, posix=True, punctuation_chars=True)  # `;`, `&&`, `|` apart
            lexer.whitespace_split = True
            try:
                words += list(lexer)
            except ValueError:  # unbalanced quotes: the shell will complain; split on blanks
                words += arg.split()
        else:
            words.append(arg)
    out = []
    for i, w in enumerate(words):
        if w.startswith("-") and is_secret_name(w.split("=", 1)[0]):
            if "=" in w:
                out.append(w.split("=", 1)[1])
            elif i + 1 < len(words):
                out.append(words[i + 1])
            continue
        m = _ASSIGNMENT.match(w)
        if m and is_secret_name(m.group(1)):
            out.append(m.group(2))
        elif "://" in w:
            out += _url_secrets(w)
    return out


def _url_secrets(url: str) -> list[str]:
    """user:password (as written, decoded, and as the Basic credential a client sends) and
    the values of credential-like query parameters."""
    try:
        u = urlsplit(url)
        password = u.password
    except ValueError:
        return []
    out = []
    if password is not None:
        user_pass = f"{unquote(u.username or '')}:{unquote(password)}"
        out += [password, unquote(password), user_pass,
                base64.b64encode(user_pass.encode()).decode()]
    out += [v for k, v in parse_qsl(u.query, keep_blank_values=True) if is_secret_name(k)]
    return out


def _header_secrets(headers: Mapping[str, str]) -> list[str]:
    """Values of credential-like headers, whole and without their scheme word (`Bearer X`
    is echoed back as either)."""
    out = []
    for k, v in headers.items():
        if is_secret_name(k):
            out.append(str(v))
            parts = str(v).split(None, 1)
            if len(parts) == 2:
                out.append(parts[1])
    return out


def _encoded_forms(secret: str) -> set[str]:
    """How a server, a proxy or a log may write a secret back: JSON-escaped with `\\/` (PHP,
    some gateways), percent-encoded (a URL, a form), base64 (a Basic credential, a token
    inside an encoded blob: at each of the three alignments, the characters that depend on
    the secret's bytes alone)."""
    forms = {secret.replace("/", "\\/"), quote(secret, safe=""), quote(secret), quote_plus(secret, safe="")}
    raw = secret.encode("utf-8")
    for pad in range(3):
        start, end = -(-8 * pad // 6), 8 * (pad + len(raw)) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            form = encode(bytes(pad) + raw).decode("ascii")[start:end]
            if len(form) >= Scrubber.MIN_ENCODED:
                forms.add(form)
    return forms


class Scrubber:
    """Every known secret value of a run, and the means to replace each in text: the value
    as it is and in the forms a server may write it back in (_encoded_forms); a body cut to a
    length is scrubbed before the cut, and a secret's start left at the cut is hidden too
    (cut())."""

    MIN_LENGTH = 4  # shorter values are too likely to be ordinary text
    MIN_ENCODED = 8  # an encoded form (base64 of a part) shorter than this could be any text

    def __init__(self, secrets: Iterable[str | None] = ()):
        values = {s for s in secrets if isinstance(s, str) and len(s.strip()) >= self.MIN_LENGTH}
        self.secrets = sorted(values, key=len, reverse=True)  # a longer secret holding a shorter one first
        forms = set(self.secrets)
        for s in self.secrets:
            if len(s) >= self.MIN_ENCODED:
                forms |= _encoded_forms(s)
        self._forms = sorted(forms, key=len, reverse=True)
        # inside a JSON string literal a secret appears escaped, as json.dumps writes it
        json_forms = set(self._forms)
        for f in self._forms:
            json_forms.add(json.dumps(f)[1:-1])
            json_forms.add(json.dumps(f, ensure_ascii=False)[1:-1])
        self._json_forms = sorted(json_forms, key=len, reverse=True)
        self.longest = len(self._json_forms[0]) if self._json_forms else 0

    @classmethod
    def of(cls, *, api_keys: Iterable[str | None] = (), headers: Iterable[Mapping[str, str]] = (),
           urls: Iterable[str | None] = (), env: Iterable[Mapping[str, object]] = (),
           argv: Iterable[Iterable[str]] = ()) -> Scrubber:
        """The secrets of a run, from everything the by-name rules apply to."""
        found: list[str | None] = list(api_keys)
        for h in headers:
            found += _header_secrets(h)
        for u in urls:
            found += _url_secrets(u) if u else []
        for e in env:
            found += [str(v) for k, v in e.items() if is_secret_name(k)]
        for a in argv:
            found += _argv_secrets([str(x) for x in a])
        return cls(found)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """`text` with every secret value (and its encoded forms) replaced by ***."""
        for s in self._forms:
            if s in text:
                text = text.replace(s, REDACTED)
        return text

    def cut(self, text: str, limit: int, read_to_bound: bool = True) -> str:
        """`text` scrubbed, then cut to `limit` characters; a secret's first characters left
        at the end of it (the text was read to a bound, or is cut here) are hidden too, so a
        cut never shows part of a secret. Read `limit + self.longest` characters when you can:
        then a secret across the cut is whole when it is scrubbed. `read_to_bound` False: the
        text is all there was, and its end is hidden only where this cut cuts it."""
        if not read_to_bound and len(text) <= limit:
            return text  # nothing cut: whole secrets are scrubbed where the text is written
        text = self.text(text)
        if not read_to_bound and len(text) <= limit:
            return text
        text = text[:limit]
        n = self.open_end(text, self.MIN_LENGTH)
        return text[:-n] + REDACTED if n else text

    def open_end(self, text: str, shortest: int = 1) -> int:
        """How many characters at the end of `text` (at least `shortest`) are the start of a
        secret, or of one of its forms, that may go on past it; 0 when none are. Text read in
        pieces keeps these back until the next piece shows whether a secret follows."""
        found = 0
        for form in self._forms:
            for n in range(min(len(form) - 1, len(text)), max(shortest, found + 1) - 1, -1):
                if text.endswith(form[:n]):
                    found = n
                    break
        return found

    def value(self, value: object) -> object:
        """A copy of JSON-like data with every string scrubbed (keys too)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def json(self, text: str) -> str:
        """JSON (or JSON lines) text with secrets replaced inside string literals only: numbers
        and structure stay as they are, and HdrHistogram encodings ("HISTF...", base64) are
        left whole, so a short secret can never corrupt a figure. json.dumps never breaks a
        string literal across lines, so only the lines holding a secret are visited."""
        hits = sum(text.count(form) for form in self._json_forms)
        if not hits:
            return text  # the usual case, found at memchr speed

        def literal(m: re.Match) -> str:
            s = m.group(0)
            if s.startswith('"HISTF'):
                return s
            for form in self._json_forms:
                if form in s:
                    s = s.replace(form, REDACTED)
            return s

        if hits > 10_000:  # secrets on most lines (every request refused with them echoed)
            return _JSON_STRING.sub(literal, text)
        lines = set()  # (start, end) of every line holding a secret, found with str.find
        for form in self._json_forms:
            at = text.find(form)
            while at >= 0:
                start = text.rfind("\n", 0, at) + 1
                end = text.find("\n", at)
                end = len(text) if end < 0 else end
                lines.add((start, end))
                at = text.find(form, end)
        out, done = [], 0
        for start, end in sorted(lines):
            out += [text[done:start], _JSON_STRING.sub(literal, text[start:end])]
            done = end
        out.append(text[done:])
        return "".join(out)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # one string literal, escapes included

_ACTIVE: contextvars.ContextVar[Scrubber | None] = contextvars.ContextVar("benchc_scrubber", default=None)
_NONE = Scrubber()


def clip(text: str, limit: int, was_cut: bool = False) -> str:
    """The one cut of a server's text that benchc keeps (an error event's message, a finish
    or stop reason, a malformed event's start): the active run's secrets scrubbed first, then
    cut to `limit` characters, a secret's start left at the cut hidden. `was_cut`: a reader
    already cut `text` at a bound (its end may be a secret's start); readers keep
    `limit + KEEP_PAST_CUT`, so that a secret across `limit` is whole when scrubbed."""
    return active().cut(text, limit, read_to_bound=was_cut)


def active() -> Scrubber:
    """The scrubber of the current context (one that knows no secret outside a run)."""
    return _ACTIVE.get() or _NONE


@contextlib.contextmanager
def scrubbing(scrubber: Scrubber) -> Iterator[Scrubber]:
    """Make `scrubber` the active one while the block runs (asyncio tasks started inside
    inherit it)."""
    token = _ACTIVE.set(scrubber)
    try:
        yield scrubber
    finally:
        _ACTIVE.reset(token)
