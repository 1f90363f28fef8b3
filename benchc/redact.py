"""Keep secrets out of every plan, result and log line benchc writes.

What counts as a secret: api keys, header values of credential-like headers,
user:password in URLs, credential-like query parameters, values of
credential-like environment variables, and the argument after a credential-
like command-line flag (`--api-key X`, `--hf-token=X`).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
_SECRET_NAME = re.compile(r"(auth|key|token|secret|password|passwd|cookie|credential)", re.I)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in headers.items()}


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_url(url: str) -> str:
    """Drop user:password and credential-like query values from a URL."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        query = urlencode([(k, REDACTED if is_secret_name(k) else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_argv(argv: list[str]) -> list[str]:
    """`--api-key X` -> `--api-key ***`, `--token=X` -> `--token=***`, in argv or a shell line."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and is_secret_name(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_shell_line(arg) if " " in arg else arg)
    return out


_SHELL_FLAG = re.compile(
    r"(--?[\w-]*(?:auth|key|token|secret|password)[\w-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)", re.I)


def redact_shell_line(line: str) -> str:
    return _SHELL_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", line)


def redact_text(text: str, secrets: list[str]) -> str:
    """Replace every known secret value inside free text (log lines, error bodies)."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, REDACTED)
    return text
