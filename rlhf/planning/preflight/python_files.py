"""Static checks of the user's python files (``reward.function``, ``agent.path``), by parsing, never running them.

Importing a file runs its module-level code: a model download, a GPU allocation, a server start, or seconds of
work, all before the cluster even exists, and again when the run loads it. So the file is parsed with ``ast`` and
compiled (which catches what the parser lets through, e.g. ``return`` outside a function) without executing it,
and the checks read the syntax tree:

* a syntax error, with its line and column;
* the definitions the loader will look for (rlhf.rewards.loader, rlhf.agents.loader): for each reward.function
  entry, the named function (else ``reward_func``, else ``compute_score``) and the contract its signature shows
  (rlhf.rewards.contracts: OpenRLHF's ``(queries, prompts, labels)``, veRL's ``compute_score(data_source,
  solution_str, ground_truth, extra_info)``, TRL's ``(prompts, completions, **kwargs)``), or why none or several
  fit, with the fix; a module path's top-level package located; an ``AgentExecutor`` or ``AgentInstance`` class (with a
  ``step`` method unless inherited from a class of the user's) for ``multi_turn``; ``async def run_agent`` or an
  ``AgentExecutor`` class for ``openai``; the constructors take no arguments;
* module-level imports of packages this interpreter cannot find (the files are loaded in the driver, this
  process), unless the file edits ``sys.path`` or the import sits in a ``try``.

What parsing cannot see, and is left to the load at start-up (which names the file too): a name made at run time
(``exec``, ``globals()[...]``, a star import, a module ``__getattr__``: reported as a warning, not an error), the
signature behind a decorator, errors raised by module-level code, and whether the function works on real inputs.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from rlhf.compat import openrlhf as openrlhf_compat
from rlhf.rewards import function as reward_function
from rlhf.rewards.contracts import CONTRACTS, NoContract, Params, choose
from rlhf.rewards.loader import VERL_STAND_INS
from rlhf.rewards.refs import DEFAULT_NAMES, parse_ref

# The reward file's contract is the loader's (rlhf.rewards.function); these checks read it from there.
REWARD_FUNC = reward_function.FUNCTION_NAME
REWARD_ARGS = reward_function.POSITIONAL_ARGS
_KEYWORDS_PASSED = set(reward_function.OPTIONAL_KEYWORDS)  # passed only when the function takes them


@dataclass(frozen=True)
class FileFinding:
    problem: str  # names the line where there is one
    fix: str = ""
    warning: bool = False


@dataclass
class _Names:
    """Module-level definitions: the node of each name, and what may define names unseen."""

    defs: dict[str, ast.AST]
    dynamic: list[str]  # why a name might exist that the tree does not show


def parse(path: str | Path) -> tuple[ast.Module | None, FileFinding | None]:
    """The file's syntax tree, or the finding that says why there is none (unreadable, syntax error)."""
    p = Path(path).expanduser()
    try:
        source = p.read_bytes()
    except OSError as e:
        return None, FileFinding(f"cannot be read: {e.strerror or e}")
    try:
        tree = ast.parse(source, filename=str(p))
        compile(tree, str(p), "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"line {e.lineno}" + (f", column {e.offset}" if e.offset else "")
        text = f": {e.text.strip()!r}" if e.text and e.text.strip() else ""
        return None, FileFinding(
            f"{where}: {type(e).__name__}: {e.msg}{text}", f"fix the file (python -m py_compile {p} shows the same)"
        )
    except ValueError as e:  # e.g. a null byte in the source
        return None, FileFinding(f"is not python source: {e}")
    return tree, None


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, looking into if/try/with blocks (conditional definitions are still definitions)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.With, ast.AsyncWith, ast.For, ast.While)):
            out += _module_statements(node.body + getattr(node, "orelse", []))
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            handlers = [s for h in node.handlers for s in h.body]
            out += _module_statements(node.body + handlers + node.orelse + node.finalbody)
    return out


def _names(tree: ast.Module) -> _Names:
    defs: dict[str, ast.AST] = {}
    dynamic: list[str] = []
    for node in _module_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
            if node.name == "__getattr__":
                dynamic.append(f"a module __getattr__ (line {node.lineno})")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs[n.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    dynamic.append(f"a star import (line {node.lineno})")
                else:
                    defs[alias.asname or alias.name.split(".")[0]] = node
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("exec", "globals", "setattr"):
            dynamic.append(f"{n.func.id}() (line {n.lineno})")
        elif isinstance(n, ast.Global):
            dynamic.append(f"a global statement (line {n.lineno})")
    return _Names(defs, dynamic)


def _import_fix(root: str) -> str:
    return f"install it (pip install {root}) or put its folder on PYTHONPATH"


def _missing_imports(tree: ast.Module) -> list[FileFinding]:
    """Unguarded module-level imports of top-level packages this interpreter cannot find."""
    if any(
        isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"
        for n in ast.walk(tree)
    ):
        return []  # the file extends sys.path itself: what it can import is only known by running it
    openrlhf_compat.install()  # as the loaders do: OpenRLHF files' 'import openrlhf...' resolves to rlhf's names
    found = []
    for node in tree.body:  # only unconditional statements: an import in a try may have a fallback
        if isinstance(node, ast.Import):
            roots = [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots = [(node.module.split(".")[0], node.lineno)]
        else:
            continue
        for root, line in roots:
            if root in sys.stdlib_module_names or root in sys.builtin_module_names:
                continue
            try:
                spec = importlib.util.find_spec(root)  # a top-level name: located, not imported
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                found.append(
                    FileFinding(
                        f"line {line}: imports {root!r}, which this Python ({sys.executable}) cannot find",
                        _import_fix(root),
                    )
                )
    return found


def _positional(args: ast.arguments) -> list[ast.arg]:
    return list(args.posonlyargs) + list(args.args)


def _reward_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[FileFinding]:
    if fn.decorator_list:
        return []  # a decorator may change the signature
    a = fn.args
    params = _positional(a)
    names = ", ".join(p.arg for p in params) or "none"
    optional = "".join(f"[, {k}=...]" for k in reward_function.OPTIONAL_KEYWORDS)
    call = f"it is called as {REWARD_FUNC}({', '.join(REWARD_ARGS)}{optional})"
    fix = f"define it as {reward_function.DEFINITION}"
    out = []
    if len(params) < len(REWARD_ARGS) and a.vararg is None:
        out.append(
            FileFinding(f"line {fn.lineno}: {REWARD_FUNC} takes {len(params)} positional ({names}); {call}", fix)
        )
    required = len([p for p in params[: len(params) - len(a.defaults)] if p.arg not in _KEYWORDS_PASSED])
    if required > len(REWARD_ARGS):
        out.append(
            FileFinding(f"line {fn.lineno}: {REWARD_FUNC} requires {required} positional ({names}); {call}", fix)
        )
    for kw, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if default is None and kw.arg not in _KEYWORDS_PASSED:
            out.append(FileFinding(f"line {fn.lineno}: {REWARD_FUNC} requires keyword {kw.arg!r}; {call}", fix))
    return out


def _other_functions(names: _Names) -> str:
    fns = sorted(n for n, node in names.defs.items() if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return f" (it defines: {', '.join(fns)})" if fns else ""


def _dynamic_warning(what: str, names: _Names) -> FileFinding:
    return FileFinding(
        f"defines no {what} that can be seen without running it; it may make one at run time "
        f"({', '.join(names.dynamic[:3])}): checked when the run loads it",
        warning=True,
    )


def _fix_any_contract() -> str:
    return "define it as one of: " + " | ".join(f"{c().definition} ({n})" for n, c in CONTRACTS.items())


def _file_function(path: str, name: str | None, contract: str) -> tuple[list[FileFinding], str | None]:
    """Findings for one function of a file (``name`` None: the names the loader searches), and the contract it is
    read in where parsing can tell."""
    tree, bad = parse(path)
    if tree is None:
        return [bad], None
    names = _names(tree)
    found = _missing_imports(tree)
    wanted = [name] if name else list(DEFAULT_NAMES)
    key = next((n for n in wanted if n in names.defs), None)
    if key is None:
        if names.dynamic:
            return found + [_dynamic_warning(" or ".join(wanted), names)], None
        if name:
            return found + [
                FileFinding(
                    f"defines no {name} at module level{_other_functions(names)}",
                    f"name a function it defines: reward.function={path}:NAME",
                )
            ], None
        return found + [
            FileFinding(
                f"defines no {REWARD_FUNC} at module level{_other_functions(names)}",
                f"add {reward_function.DEFINITION} returning {reward_function.RETURNS}, or name the function "
                f"(any contract: OpenRLHF, veRL, TRL): reward.function={path}:NAME",
            )
        ], None
    node = names.defs[key]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
        return found, None  # an assignment or a decorated def: its signature is known when the run loads it
    try:
        chosen = choose(Params.from_ast(node.args), contract)
    except NoContract as e:
        detail = _reward_signature(node) if key == REWARD_FUNC and contract in ("auto", "openrlhf") else []
        if detail and "fits no contract" in str(e):
            return found + [
                FileFinding(d.problem, f"{d.fix}; or, as veRL or TRL, {_fix_any_contract()}") for d in detail
            ], None
        sep = "" if str(e).startswith("(") else ": "  # "f(a, b) fits no contract" or "f: reward.contract=..."
        problem = f"line {node.lineno}: {key}{sep}{e}"
        if contract == "auto" and "fits no contract" not in str(e):
            # Ambiguous: reward.contract may name one, and the callers pass only the reference; the load at
            # start-up refuses it with the same words unless it does.
            return found + [FileFinding(problem + " (unless reward.contract names one)", warning=True)], None
        return found + [FileFinding(problem, "")], None
    return found, f"{key} ({chosen.name})"


def check_reward_file(path: str | Path | list[str], contract: str = "auto") -> list[FileFinding]:
    """Findings for reward.function (one reference or a list; an empty list: nothing wrong that parsing can see).
    Each file's function is read in the contract its signature shows, as the loader reads it."""
    found, _ = check_reward_functions(path, contract)
    return found


def check_reward_functions(refs: str | Path | list[str], contract: str = "auto") -> tuple[list[FileFinding], list[str]]:
    """The findings of :func:`check_reward_file`, and what was found: each function with its contract, e.g.
    ``my_reward.py:reward_func (trl)`` (a module's function, e.g. ``trl.rewards.accuracy_reward``, is located but
    not imported: its contract is read when the run loads it)."""
    items = [str(refs)] if isinstance(refs, (str, Path)) else [str(r) for r in refs]
    found: list[FileFinding] = []
    seen: list[str] = []
    for text in items:
        prefix = f"{text}: " if len(items) > 1 else ""
        try:
            ref = parse_ref(text)
        except ValueError as e:
            found.append(FileFinding(str(e), "write FILE.py, FILE.py:NAME or package.module.function"))
            continue
        if ref.is_file:
            more, what = _file_function(ref.file, ref.name, contract)
            found += [FileFinding(prefix + f.problem, f.fix, f.warning) for f in more]
            if what:
                seen.append(f"{ref.file}:{what}")
            continue
        root = ref.module.split(".")[0]
        try:
            located = importlib.util.find_spec(root) is not None
        except (ImportError, ValueError):
            located = False
        if not located and f"{ref.module}.{ref.name}" not in VERL_STAND_INS:
            found.append(
                FileFinding(f"{prefix}cannot import {root!r} in this Python ({sys.executable})", _import_fix(root))
            )
        seen.append(ref.text)
    return found, seen


# -- agent files ---------------------------------------------------------------------------------------------------


def _base_names(cls: ast.ClassDef) -> list[str]:
    out = []
    for b in cls.bases:
        if isinstance(b, ast.Name):
            out.append(b.id)
        elif isinstance(b, ast.Attribute):
            out.append(b.attr)
        else:
            out.append("?")
    return out


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


_OUR_BASES = {"AgentInstanceBase", "AgentExecutorBase", "MultiTurnAgentExecutor", "OpenAIAgentExecutor", "ABC"}


def _inherits_only_ours(cls: ast.ClassDef) -> bool:
    """True when every base is one of rlhf.agents' classes (or none): then a method not in the body is not there."""
    return all(b in _OUR_BASES or b == "object" for b in _base_names(cls))


def _constructor_findings(cls: ast.ClassDef, fix_extra: str = "") -> list[FileFinding]:
    init = _methods(cls).get("__init__")
    if init is None or init.decorator_list:
        return []
    if isinstance(init, ast.AsyncFunctionDef):
        return [FileFinding(f"line {init.lineno}: {cls.name}.__init__ is 'async def'", "make it a plain 'def'")]
    a = init.args
    required = [p.arg for p in _positional(a)[1 : len(_positional(a)) - len(a.defaults)]]
    required += [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None]
    if required:
        return [
            FileFinding(
                f"line {init.lineno}: {cls.name}() is made with no arguments, but __init__ requires "
                f"{', '.join(required)}",
                "give them defaults" + fix_extra,
            )
        ]
    return []


def check_agent_file(path: str | Path, executor: str) -> list[FileFinding]:
    """Findings for an agent file run by ``executor`` (multi_turn | openai | auto), as rlhf.agents.loader loads it."""
    tree, bad = parse(path)
    if tree is None:
        return [bad]
    names = _names(tree)
    found = _missing_imports(tree)
    execu = names.defs.get("AgentExecutor")
    inst = names.defs.get("AgentInstance")
    run_agent = names.defs.get("run_agent")
    exec_cls = execu if isinstance(execu, ast.ClassDef) else None
    inst_cls = inst if isinstance(inst, ast.ClassDef) else None
    exec_bases = _base_names(exec_cls) if exec_cls else []
    exec_is_openai = "OpenAIAgentExecutor" in exec_bases
    exec_unknown_base = exec_cls is not None and not _inherits_only_ours(exec_cls)

    needs = {
        "multi_turn": "class AgentInstance(AgentInstanceBase) with a step() method, or class AgentExecutor",
        "openai": "async def run_agent(prompt, label, session), or class AgentExecutor(OpenAIAgentExecutor)",
        "auto": "class AgentExecutor, class AgentInstance or async def run_agent(prompt, label, session)",
    }[executor]
    if executor == "multi_turn":
        usable = inst is not None or (execu is not None and (not exec_is_openai or exec_unknown_base))
    elif executor == "openai":
        usable = run_agent is not None or (execu is not None and (exec_is_openai or exec_unknown_base))
    else:
        usable = any(x is not None for x in (execu, inst, run_agent))
    if not usable:
        if names.dynamic:
            return found + [_dynamic_warning("agent class or function", names)]
        return found + [
            FileFinding(
                f"defines none of what agent.executor={executor} loads{_other_functions(names)}",
                f"define {needs} (see examples/agents)",
            )
        ]

    uses_instance = inst_cls is not None and (executor == "multi_turn" or (executor == "auto" and execu is None))
    if uses_instance and "step" not in _methods(inst_cls) and _inherits_only_ours(inst_cls):
        found.append(
            FileFinding(
                f"line {inst_cls.lineno}: class AgentInstance has no step() method",
                "add async def step(self, states, **kwargs) returning rewards, environment_feedback and done",
            )
        )
    if uses_instance:
        found += _constructor_findings(inst_cls)
    uses_executor = exec_cls is not None and (executor == "auto" or exec_is_openai == (executor == "openai"))
    if uses_executor:
        found += _constructor_findings(exec_cls, "; OpenRLHF's form is def __init__(self): super().__init__(...)")
    uses_run_agent = executor in ("openai", "auto") and not uses_executor and not uses_instance
    if uses_run_agent and isinstance(run_agent, ast.FunctionDef):
        found.append(
            FileFinding(
                f"line {run_agent.lineno}: run_agent is a plain 'def'",
                "make it 'async def run_agent(prompt, label, session)'",
            )
        )
    return found
