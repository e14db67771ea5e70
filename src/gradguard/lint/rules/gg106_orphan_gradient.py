"""GG106 orphan-gradient: a module whose parameters reach a backward pass while no optimizer built in the file
holds them.

The reading, from the program's structure alone:

* a *model object*: a name bound once in the file, to a call of a class of the file that subclasses
  ``nn.Module`` (through classes of the file) or of a ``torch.nn`` layer with parameters; its *parts* are
  the attributes its class's ``__init__`` sets to something with parameters (a layer, an ``nn.Parameter``,
  a container of them, an object of such a class of the file);
* *reached*: a call of the object flows, through the assignments of its scope, into the tensor a backward
  call differentiates, outside ``torch.no_grad()``; a part is reached when the class's ``forward`` (or a
  method it calls on ``self``) uses it;
* *held*: what the optimizers built in the file hold, read from their parameter arguments (and
  ``add_param_group``), through the names those are built from: ``obj.parameters()`` holds the whole
  object, ``obj.part.parameters()`` that part, any other mention of the object (a helper's call, ``filter``,
  ``chain``, a parameter group) the whole object.

A reached part that is held by none is reported, at the optimizer that holds the object's other parts,
or, when none holds any of it, at the first optimizer built in the backward call's scope. When unsure, no
finding: the object is mentioned anywhere else in a way that could hand its parameters on (passed to a call
whose result is kept, stored in another object or a list, rebound, iterated over, ``requires_grad``
set on it), its class (or a base) sets ``requires_grad`` itself, registers parameters by name, or has a base
that is not a module of the file; its ``forward`` detaches or turns off gradients; or the file builds
optimizers in a way the linter does not read (a framework's ``configure_optimizers``, a trainer).
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set, Tuple

from .._ast import terminal, text
from .._ast import child_nodes, nodes_of, parents_of, subtree
from .._events import optimizer_constructor
from .._model import Module, Report, backward_tensor

CODE = "GG106"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg106_orphan_gradient_bad.py", "gg106_orphan_gradient_good.py")
#: How far ``gradguard lint --fix`` may go with its fix: "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = None

ALL = "*"  # the whole object is held
# torch.nn layers that hold parameters (by their class's name in torch.nn)
_PARAM_LAYERS = frozenset({
    "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "Embedding", "EmbeddingBag", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
    "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "PReLU", "RMSNorm", "Parameter",
})
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
# methods of a module that neither hand its parameters on nor change which need gradients
_BENIGN = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "zero_grad",
                     "state_dict", "load_state_dict"})
# methods of a module that return the module itself
_SELF_RETURNING = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "double", "half", "bfloat16"})
# ways of building optimizers the linter does not read
_UNREAD_BUILDERS = ("configure_optimizers", "create_optimizer", "Trainer(", "deepspeed.initialize", "prepare(")
_NO_GRAD = ("no_grad", "inference_mode", "detach", "requires_grad", "set_grad_enabled")


def check_module(module: Module, report: Report) -> None:
    tree = module.tree
    source = module.source
    ctors = [n for n in nodes_of(tree, ast.Call) if optimizer_constructor(n) is not None]
    if not ctors or any(word in source for word in _UNREAD_BUILDERS):
        return
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    objects = _model_objects(tree, classes)
    if not objects:
        return
    parents = _parents(tree)
    binds = _bindings(tree)
    held: Dict[str, Set[str]] = {}
    covered: Set[int] = set()
    for node in ctors + _param_group_adds(tree):
        for arg in list(node.args) + [k.value for k in node.keywords]:
            _held_by(arg, objects, classes, binds, held, covered, 0)
    for name, (bind, cls) in list(objects.items()):
        if not _only_plain_mentions(tree, name, bind, covered, parents):
            del objects[name]
    for call in (n for n in nodes_of(tree, ast.Call) if isinstance(n.func, ast.Attribute)):
        if call.func.attr != "backward" and terminal(call.func) != "backward":
            continue
        loss = backward_tensor(call)
        if loss is None:
            continue
        scope = _scope_of(call, parents, tree)
        for name, site in _reached(loss, scope, objects, parents).items():
            bind, cls = objects[name]
            have = held.get(name, set())
            if ALL in have:
                continue
            parts = _reached_parts(cls, classes) if cls is not None else {ALL: True}
            if parts is None:
                continue
            missing = sorted(p for p in parts if p not in have)
            if not missing:
                continue
            where = _holder(name, ctors, have, scope)
            if where is None:
                continue
            if have:
                parts_text = ", ".join(f"`{name}.{p}`" for p in missing)
                detail = (f"`{name}` is called at line {site.lineno} on the way to the backward pass at line "
                          f"{call.lineno}, and its forward uses {parts_text}, whose parameters no optimizer built in "
                          f"this file holds (the optimizer here holds only "
                          f"{', '.join(f'`{name}.{p}`' for p in sorted(have))}).")
            else:
                kind = f" ({cls.name})" if cls is not None else ""
                detail = (f"`{name}`{kind} is called at line {site.lineno} on the way to the backward pass at line "
                          f"{call.lineno}, but no optimizer built in this file holds its parameters.")
            report(CODE, where, detail, backward=call)
            objects.pop(name)  # once per object


# --- the model objects and their classes ------------------------------------------------
def _is_module_class(cls: ast.ClassDef, classes: dict, seen=()) -> Optional[bool]:
    """True if every base is ``nn.Module`` or a module class of the file; None if some base is unreadable."""
    if not cls.bases or cls.name in seen:
        return False
    for base in cls.bases:
        name = terminal(base)
        if name == "Module" and text(base) in ("nn.Module", "torch.nn.Module", "Module"):
            continue
        if isinstance(base, ast.Name) and name in classes:
            if not _is_module_class(classes[name], classes, seen + (cls.name,)):
                return None
            continue
        return None
    return True


_STORING_NODES = (ast.Name, ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                  ast.Global, ast.Nonlocal)


def _model_objects(tree: ast.Module, classes: dict) -> Dict[str, Tuple[ast.AST, Optional[ast.ClassDef]]]:
    """name -> (its binding statement, its class of the file or None for a torch.nn layer): names bound once in
    the whole file, to a module object with parameters."""
    stores: Dict[str, int] = {}
    for node in nodes_of(tree, _STORING_NODES):  # only the kinds read below
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.arg):
            stores[node.arg] = stores.get(node.arg, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores[node.name] = stores.get(node.name, 0) + 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                key = (a.asname or a.name).split(".")[0]
                stores[key] = stores.get(key, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                stores[n] = stores.get(n, 0) + 2
    out = {}
    for node in nodes_of(tree, ast.Assign):
        if not isinstance(node.value, ast.Call):
            continue
        targets = node.targets[0]
        if len(node.targets) != 1 or not isinstance(targets, ast.Name) or stores.get(targets.id) != 1:
            continue
        value = node.value
        while isinstance(value.func, ast.Attribute) and value.func.attr in _SELF_RETURNING \
                and isinstance(value.func.value, ast.Call):
            value = value.func.value  # `Net().double()`, `Net().to(device)`: the same object
        func = value.func
        if isinstance(func, ast.Name) and func.id in classes:
            cls = classes[func.id]
            if _is_module_class(cls, classes) and _class_parts(cls, classes) is not None and _class_parts(cls, classes):
                out[targets.id] = (node, cls)
        elif isinstance(func, ast.Attribute) and text(func.value) in ("nn", "torch.nn") and func.attr in _PARAM_LAYERS:
            out[targets.id] = (node, None)
    return out


def _has_params(expr: ast.AST, classes: dict, depth: int = 0) -> bool:
    for node in subtree(expr):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and text(func.value) in ("nn", "torch.nn") and func.attr in _PARAM_LAYERS:
                return True
            if isinstance(func, ast.Name) and func.id in classes and depth < 4:
                parts = _class_parts(classes[func.id], classes, depth + 1)
                if parts:
                    return True
    return False


def _class_parts(cls: ast.ClassDef, classes: dict, depth: int = 0) -> Optional[Dict[str, ast.AST]]:
    """attribute -> its value, for the attributes with parameters its ``__init__`` (and its bases') sets; None
    when unreadable (it sets ``requires_grad`` itself, registers by name, or a base is no module of the file).
    Kept on the class's node once read."""
    memo = getattr(cls, "gg_parts", False)
    if memo is not False:
        return memo
    cls.gg_parts = None  # (a class reached again through its own attributes reads as unreadable)
    cls.gg_parts = out = _read_parts(cls, classes, depth)
    return out


def _read_parts(cls: ast.ClassDef, classes: dict, depth: int) -> Optional[Dict[str, ast.AST]]:
    for node in subtree(cls):
        if isinstance(node, ast.Attribute) and node.attr in ("requires_grad", "requires_grad_", "register_parameter",
                                                              "add_module", "register_module"):
            return None
        if isinstance(node, ast.Name) and node.id in ("setattr", "requires_grad"):
            return None
    parts: Dict[str, ast.AST] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and depth < 4:
            inherited = _class_parts(classes[base.id], classes, depth + 1)
            if inherited is None:
                return None
            parts.update(inherited)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return parts
    for node in subtree(init):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    if _has_params(node.value, classes, depth):
                        parts[target.attr] = node.value
    return parts


def _reached_parts(cls: ast.ClassDef, classes: dict) -> Optional[Dict[str, bool]]:
    """The parts its ``forward`` uses (through methods it calls on ``self``); None when unsure."""
    parts = _class_parts(cls, classes)
    if not parts:
        return None
    methods: Dict[str, ast.AST] = {}
    for c in _lineage(cls, classes):
        for n in c.body:
            if isinstance(n, ast.FunctionDef):
                methods.setdefault(n.name, n)
    if "forward" not in methods:
        return None
    used: Set[str] = set()
    todo, seen = ["forward"], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        fn = methods[name]
        if any(word in ast.unparse(fn) for word in _NO_GRAD):
            return None
        for node in subtree(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                used.add(node.attr)
                todo.append(node.attr)
    return {p: True for p in parts if p in used}


def _lineage(cls: ast.ClassDef, classes: dict) -> List[ast.ClassDef]:
    out, todo = [], [cls]
    while todo and len(out) < 8:
        c = todo.pop(0)
        out.append(c)
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    return out


# --- what the optimizers hold --------------------------------------------------------------
def _bindings(tree: ast.Module) -> Dict[str, List[ast.AST]]:
    """name -> what it is built from: the values of its assignments and augmented assignments, and the
    arguments of its ``append``/``extend``/``add``/``update``/``insert`` calls."""
    out: Dict[str, List[ast.AST]] = {}
    for node in nodes_of(tree, _BINDING_NODES):  # ast.walk's order, only the kinds read below
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in subtree(t):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, []).append(node.value)
        elif isinstance(node, (ast.For, ast.comprehension)):
            for n in subtree(node.target):
                if isinstance(n, ast.Name):
                    out.setdefault(n.id, []).append(node.iter)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            if node.func.attr in ("append", "extend", "add", "update", "insert", "__iadd__"):
                out.setdefault(node.func.value.id, []).extend(list(node.args) + [k.value for k in node.keywords])
    return out


_BINDING_NODES = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.Call)


def _param_group_adds(tree: ast.Module) -> List[ast.Call]:
    return [n for n in nodes_of(tree, ast.Call) if isinstance(n.func, ast.Attribute)
            and n.func.attr == "add_param_group"]


def _held_by(expr: ast.AST, objects: dict, classes: dict, binds: dict, held: Dict[str, Set[str]],
             covered: Set[int], depth: int, seen: Optional[Set[str]] = None) -> None:
    """Record in ``held`` what ``expr`` (an optimizer's parameter argument) hands the optimizer, following the
    names it is built from; every node read goes into ``covered``."""
    seen = set() if seen is None else seen
    stack = [expr]
    while stack:
        node = stack.pop()
        covered.add(id(node))
        chain = _attr_chain(node)
        if chain is not None and chain[0] in objects:
            name, attrs = chain[0], chain[1:]
            for sub in subtree(node):
                covered.add(id(sub))
            part = attrs[0] if attrs else None
            cls = objects[name][1]
            if len(attrs) >= 2 and cls is not None and part in (_class_parts(cls, classes) or {}):
                held.setdefault(name, set()).add(part)
            else:
                held.setdefault(name, set()).add(ALL)
            if isinstance(node, ast.Call):
                stack.extend(node.args)
                stack.extend(k.value for k in node.keywords)
            continue
        if isinstance(node, ast.Name):
            if node.id in objects:
                held.setdefault(node.id, set()).add(ALL)
            elif node.id in binds and node.id not in seen and depth < 6:
                seen.add(node.id)
                for value in binds[node.id]:
                    _held_by(value, objects, classes, binds, held, covered, depth + 1, seen)
            continue
        stack.extend(child_nodes(node))


def _attr_chain(node: ast.AST) -> Optional[List[str]]:
    """``[obj, a, b]`` for ``obj.a.b`` or ``obj.a.b(...)`` (the call's function), else None."""
    if isinstance(node, ast.Call):
        node = node.func
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not attrs:
        return None
    return [node.id] + attrs[::-1]


def _holder(name: str, ctors: List[ast.Call], have: Set[str], scope: ast.AST) -> Optional[ast.Call]:
    """Where to report: the optimizer holding the object's other parts, else the first built in ``scope``."""
    if have:
        for ctor in ctors:
            if any(isinstance(n, ast.Name) and n.id == name for n in subtree(ctor)):
                return ctor
    inside = [c for c in ctors if any(c is n for n in subtree(scope))]
    return inside[0] if inside else (ctors[0] if ctors else None)


# --- every other mention of the object must be plain ---------------------------------------
def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
    return parents_of(tree)


def _only_plain_mentions(tree: ast.Module, name: str, bind: ast.AST, covered: Set[int], parents: dict) -> bool:
    """Every mention of ``name`` is its binding, a call of it, one read by an optimizer's arguments, a benign
    method call, or an argument of a call whose result is thrown away (``wandb.watch(model)``) that is handed no
    optimizer-looking object; else the linter cannot tell where its parameters go."""
    for node in nodes_of(tree, ast.Name):
        if node.id != name:
            continue
        if id(node) in covered or isinstance(node.ctx, ast.Store) and parents.get(id(node)) is bind:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            continue  # a forward call
        if isinstance(parent, ast.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if isinstance(call, ast.Call) and call.func is parent and parent.attr in _BENIGN \
                    and isinstance(parents.get(id(call)), ast.Expr):
                continue
            return False
        if isinstance(parent, ast.Call) and node in parent.args and isinstance(parents.get(id(parent)), ast.Expr):
            others = [a for a in list(parent.args) + [k.value for k in parent.keywords] if a is not node]
            if not any("optim" in text(a).lower() for a in others) and "optim" not in text(parent.func).lower():
                continue
        return False
    return True


# --- what reaches the backward pass --------------------------------------------------------
def _scope_of(node: ast.AST, parents: dict, tree: ast.AST) -> ast.AST:
    while True:
        node = parents.get(id(node))
        if node is None:
            return tree
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node


def _under_no_grad(node: ast.AST, parents: dict, scope: ast.AST) -> bool:
    while node is not None and node is not scope:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            if any(w in text(item.context_expr) for item in node.items for w in ("no_grad", "inference_mode",
                                                                                  "set_grad_enabled")):
                return True
        node = parents.get(id(node))
    return False


def _statements(scope: ast.AST):
    """The nodes of ``scope``, nested functions, lambdas and classes left out."""
    stack = list(child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(child_nodes(node))


def _reached(loss: ast.AST, scope: ast.AST, objects: dict, parents: dict) -> Dict[str, ast.Call]:
    """object name -> its call that flows into ``loss`` through the assignments of ``scope`` (those under
    ``torch.no_grad()`` left out)."""
    assigned: Dict[str, List[ast.AST]] = {}
    for node in _statements(scope):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            if _under_no_grad(node, parents, scope):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in subtree(t):
                    if isinstance(n, ast.Name):
                        assigned.setdefault(n.id, []).append(node.value)
    out: Dict[str, ast.Call] = {}
    todo, seen = [loss], set()
    while todo:
        expr = todo.pop()
        for node in subtree(expr):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in objects:
                if not _detached(node, parents):
                    out.setdefault(node.func.id, node)
            if isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                todo.extend(assigned.get(node.id, []))
    return out


def _detached(call: ast.Call, parents: dict) -> bool:
    parent = parents.get(id(call))
    return isinstance(parent, ast.Attribute) and parent.attr in ("detach", "detach_", "item", "data")
