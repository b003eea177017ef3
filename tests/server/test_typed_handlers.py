"""Handlers take the generated request type and return the generated response type
(``pykfk.protocol.typed``), so ``mypy --strict`` (tests/test_sourcecode.py) checks every
field name and type they use; and few functions of ``pykfk/server`` are left with
``Any`` in their signature. Read from the source with ast (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

from pykfk.protocol.messages import API_SPECS
from pykfk.server.dispatch import HANDLER_MODULES

SERVER = Path(__file__).resolve().parents[2] / "pykfk" / "server"
# The share of pykfk/server functions whose signature names Any (directly or through an
# alias of the package that does) stays below this.
MAX_ANY_SHARE = 0.10
# Produce's request is the compiled walk's tuple (pykfk._core.wire.decode_produce).
REQUEST_ALIASES = {"produce": "ProduceRequest"}


def _names(node: ast.AST | None) -> set[str]:
    """Every name an annotation mentions (``typed.X`` gives "typed.X"), strings parsed."""
    found: set[str] = set()
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            found.add(f"{sub.value.id}.{sub.attr}")
            found.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                found |= _names(ast.parse(sub.value, mode="eval"))
            except SyntaxError:
                pass
    return found


def _annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return [a.annotation for a in params if a is not None and a.annotation is not None] + (
        [fn.returns] if fn.returns is not None else [])


def _any_aliases(trees: list[ast.Module]) -> set[str]:
    """Module-level type aliases of the package that stand for something with Any."""
    aliases = {"Any"}
    for _ in range(3):  # aliases of aliases
        for tree in trees:
            for node in tree.body:
                target, value = None, None
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AnnAssign) and "TypeAlias" in _names(node.annotation):
                    target, value = node.target, node.value
                if isinstance(target, ast.Name) and _names(value) & aliases:
                    aliases.add(target.id)
    return aliases


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def any_share() -> tuple[int, int, list[str]]:
    """(functions with Any in their signature, all functions, their names) in pykfk/server."""
    files = sorted(SERVER.rglob("*.py"))
    trees = [ast.parse(path.read_text()) for path in files]
    aliases = _any_aliases(trees)
    total, with_any = 0, []
    for path, tree in zip(files, trees, strict=True):
        for fn in _functions(tree):
            total += 1
            if any(_names(a) & aliases for a in _annotations(fn)):
                with_any.append(f"{path.relative_to(SERVER)}:{fn.lineno} {fn.name}")
    return len(with_any), total, with_any


def test_every_handler_takes_and_returns_its_generated_types() -> None:
    spec_names = {spec.name.lower(): spec.name for spec in API_SPECS.values()}
    aliases = _any_aliases([ast.parse(p.read_text()) for p in sorted(SERVER.rglob("*.py"))])
    for module in HANDLER_MODULES:
        api = spec_names[module.replace("_", "")]
        tree = ast.parse((SERVER / "handlers" / f"{module}.py").read_text())
        typed_names = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                       and node.module == "pykfk.protocol.typed" for alias in node.names}
        typed_names |= {f"typed.{api}Request", f"typed.{api}Response"}
        handle = next(node for node in tree.body if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "handle") or (
            isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "handle"))
        if isinstance(handle, ast.AnnAssign):
            # A compiled handler bound with its type: Callable[[RequestContext, Request], Response].
            assert isinstance(handle.annotation, ast.Subscript) and isinstance(handle.annotation.slice, ast.Tuple), module
            params, returns = handle.annotation.slice.elts
            assert isinstance(params, ast.List) and len(params.elts) == 2, module
            request, annotations = params.elts[1], [handle.annotation]
        else:
            request, returns, annotations = handle.args.args[1].annotation, handle.returns, _annotations(handle)
        expected = REQUEST_ALIASES.get(module, f"{api}Request")
        assert expected in _names(request) & (typed_names | {expected, f"typed.{expected}"}), \
            (module, ast.unparse(request) if request else None)
        assert f"{api}Response" in _names(returns) and _names(returns) & typed_names, \
            (module, ast.unparse(returns) if returns else None)
        assert not any(_names(a) & aliases for a in annotations), module


def test_few_server_functions_have_any_in_their_signature() -> None:
    with_any, total, names = any_share()
    print(f"pykfk/server: {with_any} of {total} functions have Any in their signature "
          f"({with_any / total:.1%}): {names}")
    assert with_any / total < MAX_ANY_SHARE, names
