"""The checks that `--only` and `--skip` name, for every path that judges a selection (`gpudiag check`, its fast
path, the service answering it): a misspelt name is one short line with a "did you mean" (difflib, at most three)
instead of the whole list of check IDs (1,369 characters)."""

from __future__ import annotations

from typing import Iterable

MAX_SUGGESTIONS = 3


def unknown_name(option: str, name: str) -> str:
    """The one-line refusal of `name`, which is neither a check ID nor a family."""
    import difflib  # here: only a misspelt name needs it

    from gpudiag.checks import CHECK_IDS, FAMILIES

    known = [*FAMILIES, *CHECK_IDS]
    close = difflib.get_close_matches(name, known, n=MAX_SUGGESTIONS, cutoff=0.6)
    if not close and "." in name:  # a known family with a misspelt check: its checks are the likely ones
        family = name.split(".", 1)[0]
        close = difflib.get_close_matches(name, [i for i in CHECK_IDS if i.startswith(family + ".")],
                                          n=MAX_SUGGESTIONS, cutoff=0.0)
    shown = name if len(name) <= 60 else name[:57] + "..."
    if close:
        return f"{option}: unknown check or family {shown!r}; did you mean {', '.join(close)}?"
    return f"{option}: unknown check or family {shown!r}; families: {', '.join(FAMILIES)} (gpudiag check --help)"


# `--only ''` (an unset variable in a script: `--only "$CHECKS"`) would otherwise mean every check.
EMPTY_ONLY = "--only names no check or family; give check IDs or families (--only pcie,ecc) or leave --only out"


def select_checks(only: Iterable[str] = (), skip: Iterable[str] = ()):
    """resolve_selection(only, skip), refusing an unknown name with unknown_name()'s line, and a selection that
    leaves no check to run (`--only pcie --skip pcie`), with ValueError."""
    from gpudiag.checks import CHECK_IDS, FAMILIES, resolve_selection

    only, skip = list(only), list(skip)
    known = set(CHECK_IDS) | set(FAMILIES)
    for option, names in (("--only", only), ("--skip", skip)):
        for name in names:
            if name not in known:
                raise ValueError(unknown_name(option, name))
    selected = resolve_selection(only, skip)
    if not selected:
        given = " ".join(f"{option} {','.join(names)}" for option, names in (("--only", only), ("--skip", skip))
                         if names)
        raise ValueError(f"{given}: no check is left to run" if len(given) <= 100 else "no check is left to run")
    return selected
