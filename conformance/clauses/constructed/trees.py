"""Cases by construction, trees (issue 32): every operation over a spawn tree, on trees whose
nodes at every depth are in every status class, checked step by step against the model.

The status classes are the contract's statuses plus, for every operation that records an
intent instead of moving an item (``intent_from``: cancel on running work), the status with that
intent recorded (``running+cancel_requested``).  A tree is a chain from a root as deep as the spawn
budget leaves one spare spawn (depths 0..3 under the default budget of 4); in each tree the node at
one depth is driven into the class and, unless that node is the deepest, the deepest node is
claimed (a running leaf under it).  The nodes above and below stay queued, so an operation that
must pass through the class's node (a cascade through a finished interior node, the count of a
budget, a child's wake of its parent) meets it with live work on both sides.

The tree operations are the operations of the profile that spawns (the one whose arguments name a
``parent_id``); each is registered under the clause of the rule it exercises (``TREE_RULES``,
checked against the contract: a tree operation the contract gains without a rule here fails the
case generation loudly, never silently).  When both that profile and the wakeups profile are
claimed, every node has a suspended run and each case reads every run back through the model
(``wakes_parent``: a child reaching a terminal status wakes its parent, whatever the tree's
shape).  Param ids: ``tree:<operation>:<status class>`` (every depth inside one case: one fresh
ledger per case, few cases).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ledgercheck.conformance.clauses import CaseFn, cases, check
from ledgercheck.conformance.harness import DriveBlocked, Harness, NotApplicable
from ledgercheck.spec import Spec

# What each tree operation is about: the clause that owns the rule the operation carries out.
# Operations come from the contract (tree_operations); this only says which clause a failure of
# each is blamed on, and tree_operations refuses a contract whose tree profile has one it lacks.
TREE_RULES = {"cancel_tree": "spawn.cancel_cascade", "children": "spawn.join", "spawn": "spawn.budget"}
WAKES = "spawn.wakes_parent"


@dataclass(frozen=True)
class StatusClass:
    label: str  # a status, or "<status>+<intent event>"
    status: str
    intent_op: str | None = None  # the operation recording the intent, if any


def status_classes(spec: Spec) -> list[StatusClass]:
    """Every status of the contract, and every status with each intent an operation can record
    on it (``intent_from``)."""
    out = [StatusClass(s, s) for s in spec.statuses]
    for op in spec.operations.values():
        if op.intent_event and op.intent_from:
            out += [StatusClass(f"{s}+{op.intent_event}", s, op.name) for s in op.intent_from]
    return out


def tree_profile(spec: Spec) -> str | None:
    """The profile whose operation spawns a child under a parent (an argument ``parent_id``)."""
    return next((op.profile for op in spec.operations.values() if "parent_id" in op.args), None)


def tree_operations(spec: Spec) -> list[str]:
    """The writing and reading operations of the tree profile, each of which takes one node."""
    prof = tree_profile(spec)
    ops = [n for n, op in spec.operations.items() if op.profile == prof and ({"work_id", "parent_id"} & set(op.args))]
    missing = [o for o in ops if o not in TREE_RULES]
    if missing:
        raise ValueError(f"trees: the contract's tree operations {missing} have no rule in TREE_RULES")
    return ops


def reach(h: Harness, wid: str, cls: StatusClass) -> None:
    """Drive ``wid`` into the status class (NotApplicable/DriveBlocked when the claimed profiles
    cannot)."""
    h.drive(wid, cls.status)
    if cls.intent_op is not None:
        h.need(cls.intent_op)
        h.do(cls.intent_op, work_id=wid)
        step = h.spec.effects.get(cls.intent_op, {}).get("intent")
        fields = [f for f, _ in step.writes] if step is not None else []
        if any(not h.item(wid).get(f) for f in fields):
            raise DriveBlocked(f"{cls.intent_op} recorded no intent on {wid}")


def chain_length(spec: Spec) -> int:
    """Generations below the root: as deep as three, one spawn of the budget left spare."""
    return max(1, min(3, spec.spawn_budget - 1))


class Tree:
    """A chain root -> ... -> leaf; ``nodes[d]`` is the node at depth d."""

    def __init__(self, h: Harness, name: str, woken: bool = False) -> None:
        self.h = h
        self.woken = woken and self._wakeups(h)
        root = h.create(source_id=f"tree-{name}")
        self.nodes = [root]
        for d in range(chain_length(h.spec)):
            out = h.do("spawn", parent_id=self.nodes[-1], key=f"{name}-gen-{d + 1}")
            check(out.ok, "spawn.budget", f"a spawn within the budget was refused: {out.code} {out.message}", h)
            self.nodes.append(out.value["work"]["work_id"])
        if self.woken:
            for w in self.nodes:
                h.do("wake_suspend", run_id=w)

    @staticmethod
    def _wakeups(h: Harness) -> bool:
        return h.spec.spawn_wakeup is not None and "wakeups" in h.profiles and h.claims("wake_suspend") \
            and h.claims("wake_get")

    def shape(self, depth: int, cls: StatusClass) -> None:
        """The node at ``depth`` into ``cls``; the deepest node running unless it is that node."""
        reach(self.h, self.nodes[depth], cls)
        leaf = self.nodes[-1]
        if depth != len(self.nodes) - 1 and self.h.item(leaf)["status"] == self.h.spec.initial_status:
            self.h.need_claim_by_id()
            self.h.claim(leaf, owner="worker-leaf")

    def read_back(self) -> None:
        """Every node's children and run, read through the model (each operation already read back
        the items it touched)."""
        h = self.h
        for w in self.nodes:
            if h.claims("children"):
                h.do("children", work_id=w)
            if self.woken:  # judged here under the clause of a child's wake (a read's own clause is another)
                got = h.do("wake_get", run_id=w).value
                want = h.model.runs.get(w) or {}
                check(isinstance(got, dict) and sorted(got.get("wakeups") or []) == sorted(want.get("wakeups") or [])
                      and got.get("state") == want.get("state"), WAKES,
                      f"the run of {w} (depth {self.nodes.index(w)}, {h.item(w)['status']}) reads {got!r:.160}; its "
                      f"children's finishing leaves it {want.get('state')} with {want.get('wakeups')}", h)


def _apply(h: Harness, op: str, tree: Tree, depth: int, name: str) -> None:
    """Apply the tree operation ``op`` at every node (a write at the root and at the class's node)."""
    if op == "cancel_tree":
        for at in dict.fromkeys((tree.nodes[depth], tree.nodes[0])):
            out = h.do("cancel_tree", work_id=at, reason=f"stop {name}")
            check(out.ok, TREE_RULES[op], f"cancel_tree({at}) was refused: {out.code} {out.message}", h)
            for w in [at, *tree.nodes[tree.nodes.index(at) + 1:]]:
                it = h.item(w)
                check(h.spec.terminal(it["status"]) or it["cancel_requested"], TREE_RULES[op],
                      f"after cancel_tree({at}) the node {w} at depth {tree.nodes.index(w)} is {it['status']} "
                      "without a cancel request", h)
    elif op == "spawn":
        for d, w in enumerate(tree.nodes):
            h.do("spawn", parent_id=w, key=f"{name}-extra-{d}")  # the spare spawn, then the budget
            h.do("spawn", parent_id=w, key=f"{name}-gen-{d + 1}")  # a replay (or a new key under the leaf)
    else:
        for w in tree.nodes:
            h.do(op, work_id=w)


def _tree_case(op: str, cls: StatusClass) -> CaseFn:
    def fn(h: Harness) -> None:
        h.need("spawn", op)
        ran = 0
        for depth in range(chain_length(h.spec) + 1):
            name = f"d{depth}"
            tree = Tree(h, name)
            try:
                tree.shape(depth, cls)
            except (NotApplicable, DriveBlocked):
                continue  # a class the claimed profiles cannot reach (or claim by id is not offered)
            ran += 1
            _apply(h, op, tree, depth, name)  # (each call reads back what it touched; children reads the tree)
        if not ran:
            raise NotApplicable(f"no node of a tree can be brought to {cls.label} with the claimed profiles")
    return fn


def _wakes_case(cls: StatusClass) -> CaseFn:
    """A node in the class at every depth, then the whole tree finished from the leaf up: every
    child's terminal status wakes its parent's run, whatever its parent's class."""
    def fn(h: Harness) -> None:
        h.need("spawn", "cancel_tree")
        ran = 0
        for depth in range(chain_length(h.spec) + 1):
            tree = Tree(h, f"w{depth}", woken=True)
            if not tree.woken:
                raise NotApplicable(f"{WAKES} is judged only when wakeups is claimed with the spawn profile")
            try:
                tree.shape(depth, cls)
            except (NotApplicable, DriveBlocked):
                continue
            ran += 1
            h.do("cancel_tree", work_id=tree.nodes[0])
            for w in reversed(tree.nodes):  # a running node honours its cancel request at close-out
                it = h.item(w)
                if it["status"] == "running" and it["cancel_requested"] and h.claims("close_out"):
                    h.do("close_out", work_id=w, token=h.token(w), status="cancelled")
            tree.read_back()
        if not ran:
            raise NotApplicable(f"no node of a tree can be brought to {cls.label} with the claimed profiles")
    return fn


def _gen(op: str) -> Callable[[Spec], Iterable[tuple[str, CaseFn]]]:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        if op not in tree_operations(spec):
            return
        for cls in status_classes(spec):
            yield f"tree:{op}:{cls.label}", _tree_case(op, cls)
    return gen


for _op, _clause in TREE_RULES.items():
    cases(_clause)(_gen(_op))


@cases(WAKES)
def _wakes(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
    if spec.spawn_wakeup is None or tree_profile(spec) is None:
        return
    for cls in status_classes(spec):
        yield f"tree:wakes_parent:{cls.label}", _wakes_case(cls)
