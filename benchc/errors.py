"""Every error benchc raises on purpose, and the exit code each maps to.

Exit codes (never renumber one; add new ones at the end):

    code  meaning                                   raised as
    ----  ----------------------------------------  ------------------------------
       0  success
       1  a threshold failed (spec `slo`,           ThresholdFailed
          `compare --fail-on`)
       2  invalid spec, plan or command-line usage  SpecError, SpecErrors, UsageError, PlanError
       3  run aborted (server failed, target        RunError
          unreachable before any load was sent)
       4  internal error (a bug in benchc)          any other exception, caught in cli.main
       5  a result document is unreadable, of an    ResultFormatError
          unknown version, or fails its schema
       6  --strict: the result is written but not   UntrustedResult
          to be trusted (a point was client-limited,
          or the server returned other output
          lengths than the request pinned down)
       7  a load point failed: none of its          PointFailed
          requests completed, or more than half
          failed (results/failed.py; the result
          is written with every figure)
       8  a capacity search ended undecided: its    SearchUndecided
          probes could not be trusted, so there is
          no answer (result written)
     130  interrupted by Ctrl-C, SIGTERM or SIGHUP  Interrupted
          (partial result written when there was
          one)
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_USAGE = 2
EXIT_RUN_ABORTED = 3
EXIT_INTERNAL = 4
EXIT_RESULT_FORMAT = 5
EXIT_UNTRUSTED = 6
EXIT_POINT_FAILED = 7
EXIT_SEARCH_UNDECIDED = 8
EXIT_INTERRUPTED = 130


class BenchcError(Exception):
    """Base of every error benchc reports to the user (not a bug)."""

    exit_code = EXIT_INTERNAL


class UsageError(BenchcError):
    """Bad command-line arguments or a file that cannot be used as asked."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec, located in its source file.

    `line` and `col` are 1-based; both are 0 when the value did not come from
    the file (a --set override names itself in `file` then).
    """

    file: str
    line: int
    col: int
    path: str  # JSON path, e.g. $.load.sweep.concurrency[2]
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}"


class SpecError(BenchcError):
    """A spec is invalid; carries every problem found, not only the first."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[SpecProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class PlanError(BenchcError):
    """A valid spec that cannot be compiled (e.g. a dataset file is missing)."""

    exit_code = EXIT_USAGE


class RunError(BenchcError):
    """The run could not go on (server would not start, target unreachable)."""

    exit_code = EXIT_RUN_ABORTED


class ThresholdFailed(BenchcError):
    """One or more thresholds were breached; the message lists each."""

    exit_code = EXIT_THRESHOLD


class ResultFormatError(BenchcError):
    """A result document is unreadable, of an unknown version, or invalid."""

    exit_code = EXIT_RESULT_FORMAT


class UntrustedResult(BenchcError):
    """--strict found a reason not to trust the figures (written all the same)."""

    exit_code = EXIT_UNTRUSTED


class PointFailed(BenchcError):
    """A load point failed (results/failed.py says when); the result is written all the same."""

    exit_code = EXIT_POINT_FAILED


class SearchUndecided(BenchcError):
    """A capacity search stopped with no answer: a load's probes could not be trusted twice.
    Not an SLO failure (1) and not a success (0): CI must tell "no answer" from an answer."""

    exit_code = EXIT_SEARCH_UNDECIDED


class Interrupted(BenchcError):
    """The user pressed Ctrl-C; what was measured has been written."""

    exit_code = EXIT_INTERRUPTED
