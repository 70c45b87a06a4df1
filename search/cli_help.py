"""The command line of ``python -m search``: its ``--help`` text and the check of ``key=value`` arguments.

``--help`` is Hydra's, with the template in ``conf/config.yaml`` (``hydra.help``); the
parts a template cannot hold are filled in by the ``${search_help:groups}`` and
``${search_help:keys}`` resolvers, from the files that already say them:

- each config group's options (``conf/<group>/*.yaml``, recipes ``recipes/experiment/*.yaml``)
  with the file's ``# help:`` line, or else the first sentence of its leading comment;
- a group's meaning from its entry's comment in ``conf/config.yaml``'s defaults list, or
  else the first sentence of its schema's docstring (search/config.py);
- the top-level keys with the comment beside (or above) their field in ``SearchConfig``,
  or else beside the key in ``conf/config.yaml``.

:func:`unknown_key` runs before Hydra: Hydra answers ``n_trial=5`` with "use +n_trial=5",
which the schema then refuses; the job's own "did you mean 'n_trials'?" comes first.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import textwrap
import typing
from pathlib import Path
from typing import Any

from search.paths import CONF_DIR, RECIPES_DIR

__all__ = ["HELP_TAG", "register_help_resolver", "groups", "option_help", "group_help", "top_level_keys", "unknown_key"]

HELP_TAG = "# help:"  # not "# @help:": Hydra reads "# @key value" lines of a header as directives
WIDTH = 100  # columns of the help text
_PRIMARY = CONF_DIR / "config.yaml"


def register_help_resolver() -> None:
    """``${search_help:groups}`` / ``${search_help:keys}`` -> the sections of ``--help`` (conf/config.yaml)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("search_help"):
        OmegaConf.register_new_resolver("search_help", _resolve_help)


def _resolve_help(section: str, *, _root_: Any) -> str:
    """One section of the help for the composed config ``_root_`` (its choices and values marked).

    Hydra fills the template with ``string.Template``, so a ``$`` of ours is doubled.
    """
    from omegaconf import OmegaConf

    if section == "groups":
        choices = OmegaConf.to_container(_root_.hydra.runtime.choices)
        text = _groups_text(choices if isinstance(choices, dict) else {})
    elif section == "keys":
        text = _keys_text(_root_)
    else:
        raise ValueError(f"unknown help section {section!r}; known: groups, keys")
    return text.replace("$", "$$")


# ----------------------------------------------------------------------------- groups
def _defaults_comments() -> dict[str, str]:
    """``group -> trailing comment`` of the defaults list of conf/config.yaml (groups in their order)."""
    out: dict[str, str] = {}
    entry = re.compile(r"\s+-\s+(?:override\s+)?(\w+)\s*:\s*[^#\s]+\s*(?:#\s*(.*))?$")
    inside = False
    for line in _PRIMARY.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            inside = line.startswith("defaults:")
        m = entry.match(line) if inside else None
        if m:
            out[m[1]] = (m[2] or "").strip()
    return out


def groups() -> list[str]:
    """The config groups: conf/config.yaml's defaults order, then any other folder of conf/."""
    present = {p.name for p in CONF_DIR.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    present.discard("hydra")  # conf/hydra/<group>/: the project's options of Hydra's own groups
    if (CONF_DIR / "hydra").is_dir():
        present |= {f"hydra/{p.name}" for p in (CONF_DIR / "hydra").iterdir() if p.is_dir()}
    present.add("experiment")
    ordered = [g for g in _defaults_comments() if g in present]
    return ordered + sorted(present - set(ordered))


def _folder(group: str) -> Path:
    return (RECIPES_DIR if group == "experiment" else CONF_DIR) / group


def _first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph (up to ``.``, ``?`` or ``!`` before no lowercase word)."""
    text = " ".join(text.strip().split("\n\n")[0].split())
    m = re.search(r"[.?!](?=\s+[^a-z\s]|$)", text)
    return text[: m.end()] if m else text


def _rst(text: str) -> str:
    """Docstring markup for the terminal: ````x```` -> x, :data:`NAME` -> NAME's names from search/config.py."""
    from search import config

    def names(m: re.Match) -> str:
        value = getattr(config, m[1], None)
        return f"[{', '.join(value)}]" if isinstance(value, (dict, tuple, list)) else m[1]

    return re.sub(r":\w+:`(\w+)`", names, text.replace("``", ""))


def option_help(path: Path) -> str:
    """What an option file is: its ``# help:`` line, else the first sentence of its leading comment.

    The leading comment stops at the first non-comment line or indented example
    (``#   python -m search ...``); ``# @package`` lines are skipped.
    """
    lines = path.read_text().splitlines()
    for line in lines:
        if line.startswith(HELP_TAG):
            return line[len(HELP_TAG):].strip()
    words = []
    for line in lines:
        if not line.startswith("#") or line.startswith("#   "):
            break
        if not line.startswith("# @"):
            words.append(line.lstrip("#").strip())
    return _first_sentence(" ".join(words))


#: Hydra's own groups that conf/hydra/ adds options to, and what they select
_HYDRA_GROUPS = {
    "hydra/launcher": "how the jobs of a sweep (-m) run: Hydra's basic (one after another), joblib (processes "
                      "on this machine), submitit_local, submitit_slurm, or the project's options below",
}


def group_help(group: str) -> str:
    """What a group selects: its comment in conf/config.yaml's defaults list, else its schema's docstring."""
    comment = _defaults_comments().get(group) or _HYDRA_GROUPS.get(group)
    if comment:
        return comment
    from search.config import SearchConfig

    schema = typing.get_type_hints(SearchConfig).get(group)
    doc = schema.__doc__ if dataclasses.is_dataclass(schema) else None
    return _first_sentence(_rst(doc)) if doc else ""


def _groups_text(choices: dict[str, Any]) -> str:
    lines = []
    for group in groups():
        options = sorted(p.stem for p in _folder(group).glob("*.yaml"))
        where = f"{_folder(group).relative_to(CONF_DIR.parent)}/"
        lines.append(textwrap.fill(f"{group}: {group_help(group)} ({where})", WIDTH, subsequent_indent="  "))
        width = max((len(o) for o in options), default=0) + 6
        for option in options:
            mark = "*" if choices.get(group) == option else " "
            lines.append(_wrap(f"  {mark} {option}", option_help(_folder(group) / f"{option}.yaml"), width))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- top-level keys
def _source_comments(cls: type) -> dict[str, str]:
    """``field -> comment`` of a dataclass: the comment on the field's line, else the comment lines above it."""
    import ast
    import inspect
    import io
    import tokenize

    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, whole line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            whole = not tok.line[: tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), whole)
    out = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        text, whole = comments.get(node.lineno, ("", True))
        if not text or whole:
            above, row = [], node.lineno - 1
            while row in comments and comments[row][1]:
                above.insert(0, comments[row][0])
                row -= 1
            text = " ".join(above)
        out[node.target.id] = text
    return out


def _yaml_comments() -> dict[str, str]:
    """``key -> trailing comment`` of the top-level keys of conf/config.yaml."""
    entry = re.compile(r"(\w+):\s*[^#\s][^#]*#\s*(.*)$")
    return {m[1]: m[2].strip() for m in map(entry.match, _PRIMARY.read_text().splitlines()) if m}


def top_level_keys() -> dict[str, str]:
    """The top-level keys of ``SearchConfig`` that are not groups, with what each means."""
    from search.config import SearchConfig

    hints = typing.get_type_hints(SearchConfig)
    from_schema, from_yaml = _source_comments(SearchConfig), _yaml_comments()
    return {
        f.name: from_schema.get(f.name) or from_yaml.get(f.name, "")
        for f in dataclasses.fields(SearchConfig)
        if not dataclasses.is_dataclass(hints[f.name])
    }


def _keys_text(root: Any) -> str:
    from search.redact import redact

    def shown(key: str) -> str:
        value = root.get(key)
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        return f"{key}={redact(text)}"

    keys = top_level_keys()
    width = max(len(shown(k)) for k in keys) + 4
    return "\n".join(_wrap(f"  {shown(k)}", meaning, width) for k, meaning in keys.items())


def _wrap(head: str, text: str, width: int) -> str:
    """``head`` padded to ``width`` columns, then ``text`` wrapped beside it (below it when ``head`` is long)."""
    if width > WIDTH // 2:
        return "\n".join([head, *textwrap.wrap(text, WIDTH, initial_indent=" " * 8, subsequent_indent=" " * 8)])
    lines = textwrap.wrap(text, WIDTH - width) or [""]
    return "\n".join([head.ljust(width) + lines[0], *(" " * width + line for line in lines[1:])]).rstrip()


# ----------------------------------------------------------------------------- the key check
def _field(key: str) -> tuple[bool, Any]:
    """(whether the dotted ``key`` names a field of ``SearchConfig``, its type: None below a mapping or ``Any``,
    whose keys are the user's)."""
    from search.config import SearchConfig

    schema: Any = SearchConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(schema):
            return True, None
        hints = typing.get_type_hints(schema)
        if part not in hints:
            return False, None
        schema = hints[part]
        members = [t for t in typing.get_args(schema) if t is not type(None)]
        if typing.get_origin(schema) is typing.Union and len(members) == 1:
            schema = members[0]  # Optional[X] -> X
    return True, schema


def _is_known(key: str) -> bool:
    """Whether the dotted ``key`` names a field of ``SearchConfig`` (below a mapping or ``Any``: anything)."""
    return _field(key)[0]


_OWN_CONFIGS = ("hydra.searchpath", "--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def _plain_overrides(args: list[str]) -> list[tuple[str, str, str]]:
    """(arg, key, value) of each plain ``key=value`` override the schema judges: ``+key=...``, ``++key=...``,
    ``~key``, ``hydra.*`` keys, flags and group@package options are left to Hydra, and so is every override of a
    command that brings configs of its own (``--config-dir``, ``--config-name``, ``hydra.searchpath``)."""
    if any(a.startswith(_OWN_CONFIGS) for a in args):
        return []
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and not arg.startswith(("-", "+", "~")) and key.split(".")[0] != "hydra" \
                and not any(c in key for c in "@/"):
            out.append((arg, key, value.strip()))
    return out


def scalar_for_list(args: list[str]) -> str | None:
    """A one-line error for a command-line ``key=value`` that gives one bare value (or a comma sweep of them) to a
    list field of the schema, such as ``deployment.tp=8``, else None. Hydra's own report names the field
    but not the fix (``Invalid value assigned: int is not a ListConfig``). A bracketed value, an
    interpolation, a sweep function (``choice(...)``, ``range(...)``) and ``null`` pass through, as does what
    :func:`_plain_overrides` leaves to Hydra."""
    for arg, key, value in _plain_overrides(args):
        if not value or value.startswith(("[", "$")) or "(" in value or value == "null":
            continue
        known, kind = _field(key)
        if not known or typing.get_origin(kind) is not list:
            continue
        if "," in value:
            parts = [v.strip() for v in value.split(",")]
            return (f"{key} is a list (search/config.py) and {arg} gives bare values: write {key}=[{','.join(parts)}] "
                    f"for one study that chooses among them, or -m {key}={','.join(f'[{v}]' for v in parts)} "
                    "for one study each")
        return f"{key} is a list (search/config.py): write {key}=[{value}] for that value alone ({arg} gives it bare)"
    return None


def unknown_key(args: list[str]) -> str | None:
    """A one-line error for a command-line ``key=value`` whose key the schema lacks, else None.

    The suggestion is search/config.py's "did you mean" (the one the job gives for a
    key in a YAML file), or the closest config group. What :func:`_plain_overrides` leaves to
    Hydra passes through.
    """
    from search.config import _did_you_mean

    known_groups = groups()
    for arg, key, _ in _plain_overrides(args):
        if key in known_groups or _is_known(key):
            continue
        hint = _did_you_mean(key)
        close = difflib.get_close_matches(key, known_groups, n=1)
        if not hint.startswith("did you mean") and close:
            hint = f"did you mean the config group {close[0]!r}? "
        return (f"unknown key {key!r} ({arg}); {hint}"
                "(the schema is search/config.py; python -m search --help lists the keys)")
    return None
    known_groups = groups()
    for arg in args:
        key, sep, _ = arg.partition("=")
        if not sep or arg.startswith(("-", "+", "~")) or key.split(".")[0] == "hydra" or any(c in key for c in "@/"):
            continue
        if key in known_groups or _is_known(key):
            continue
        hint = _did_you_mean(key)
        close = difflib.get_close_matches(key, known_groups, n=1)
        if not hint.startswith("did you mean") and close:
            hint = f"did you mean the config group {close[0]!r}? "
        return (f"unknown key {key!r} ({arg}); {hint}"
                "(the schema is search/config.py; python -m search --help lists the keys)")
    return None
