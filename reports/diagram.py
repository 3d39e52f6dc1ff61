"""The contract's state machine as an inline SVG, laid out here without any external tool.

Layout, in the usual layered way: cycles are broken by reversing the edges a depth-first walk from
the initial status finds going backwards; statuses get the longest-path layer of that acyclic graph
(terminal statuses move to the last layer); edges spanning several layers pass through virtual
points; a few barycenter sweeps order each layer to keep crossings down.  Requeue edges back to the
initial status are drawn on one shared bus along the bottom instead of as long curves.  Labels go
to the first spot along their edge that overlaps no status and no other label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .text import h

NODE_H = 34.0
NODE_PAD = 16.0
CHAR_W = 7.6  # a generous average for 13px sans-serif
LABEL_CHAR_W = 6.4  # 11px
LABEL_H = 14.0
LAYER_GAP = 150.0
ROW_GAP = 24.0
VIRTUAL_GAP = 20.0
PORT_GAP = 7.0
MARGIN = 24.0
BUS_GAP = 26.0


@dataclass
class Node:
    name: str
    virtual: bool = False
    layer: int = 0
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0  # left
    y: float = 0.0  # top
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2


@dataclass
class Box:
    x: float
    y: float
    w: float
    h: float

    def overlaps(self, o: Box, pad: float = 2.0) -> bool:
        return not (self.x + self.w + pad <= o.x or o.x + o.w + pad <= self.x or
                    self.y + self.h + pad <= o.y or o.y + o.h + pad <= self.y)


def _label(t: Mapping[str, Any]) -> str:
    return ", ".join(t["ops"]) + (f" [{t['guard']}]" if t.get("guard") else "")


def _back_edges(names: Sequence[str], edges: Sequence[tuple[str, str]], start: str) -> set[tuple[str, str]]:
    succ: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        succ[a].append(b)
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    back: set[tuple[str, str]] = set()

    def visit(n: str) -> None:
        state[n] = 1
        for m in succ[n]:
            if state.get(m) == 1:
                back.add((n, m))
            elif m not in state:
                visit(m)
        state[n] = 2

    for root in [start, *names]:
        if root not in state:
            visit(root)
    return back


def _layers(names: Sequence[str], dag: Sequence[tuple[str, str]], terminal: set[str]) -> dict[str, int]:
    preds: dict[str, list[str]] = {n: [] for n in names}
    succ: dict[str, list[str]] = {n: [] for n in names}
    for a, b in dag:
        preds[b].append(a)
        succ[a].append(b)
    layer: dict[str, int] = {}
    pending = list(names)
    while pending:  # the graph is acyclic, so each round places at least one status
        for n in list(pending):
            if all(p in layer for p in preds[n]):
                layer[n] = max((layer[p] + 1 for p in preds[n]), default=0)
                pending.remove(n)
    last = max(layer.values(), default=0)
    for n in names:
        if n in terminal and not succ[n]:
            layer[n] = last
    return layer


def _order(layers: list[list[Node]], links: Sequence[tuple[Node, Node]], sweeps: int = 6) -> None:
    preds: dict[int, list[Node]] = {}
    succs: dict[int, list[Node]] = {}
    for a, b in links:
        succs.setdefault(id(a), []).append(b)
        preds.setdefault(id(b), []).append(a)

    def pos(layer: list[Node]) -> dict[int, int]:
        return {id(n): i for i, n in enumerate(layer)}

    for sweep in range(sweeps):
        down = sweep % 2 == 0
        rng = range(1, len(layers)) if down else range(len(layers) - 2, -1, -1)
        for li in rng:
            ref = pos(layers[li - 1] if down else layers[li + 1])
            nbrs = preds if down else succs

            def key(item: tuple[int, Node], ref: dict[int, int] = ref, nbrs: dict[int, list[Node]] = nbrs) -> float:
                i, n = item
                ps = [ref[id(m)] for m in nbrs.get(id(n), []) if id(m) in ref]
                return sum(ps) / len(ps) if ps else float(i)

            layers[li] = [n for _, n in sorted(enumerate(layers[li]), key=key)]


def _cubic(p0: tuple[float, float], p1: tuple[float, float], t: float) -> tuple[float, float]:
    (x0, y0), (x1, y1) = p0, p1
    dx = (x1 - x0) / 2
    c1, c2 = (x0 + dx, y0), (x1 - dx, y1)
    mt = 1 - t
    x = mt ** 3 * x0 + 3 * mt * mt * t * c1[0] + 3 * mt * t * t * c2[0] + t ** 3 * x1
    y = mt ** 3 * y0 + 3 * mt * mt * t * c1[1] + 3 * mt * t * t * c2[1] + t ** 3 * y1
    return x, y


def _path_d(points: Sequence[tuple[float, float]]) -> str:
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        dx = (x1 - x0) / 2
        d += f" C{x0 + dx:.1f},{y0:.1f} {x1 - dx:.1f},{y1:.1f} {x1:.1f},{y1:.1f}"
    return d


def _along(points: Sequence[tuple[float, float]], u: float) -> tuple[float, float]:
    segs = len(points) - 1
    k = min(segs - 1, int(u * segs))
    return _cubic(points[k], points[k + 1], u * segs - k)


class Layout:
    """Positions of statuses, edge routes and label spots for one state machine."""

    def __init__(self, statuses: Sequence[Mapping[str, Any]], transitions: Sequence[Mapping[str, Any]]) -> None:
        self.statuses = list(statuses)
        self.transitions = list(transitions)
        names = [s["name"] for s in self.statuses]
        self.initial = next((s["name"] for s in self.statuses if s["initial"]), names[0])
        terminal = {s["name"] for s in self.statuses if s["terminal"]}
        self.bus = [t for t in self.transitions if t["requeue"] and t["to"] == self.initial and t["from"] != self.initial]
        routed = [t for t in self.transitions if t not in self.bus and t["from"] != t["to"]]
        self.loops = [t for t in self.transitions if t["from"] == t["to"]]
        back = _back_edges(names, [(t["from"], t["to"]) for t in routed], self.initial)
        self.reversed = {(t["from"], t["to"]) for t in routed if (t["from"], t["to"]) in back}
        dag = [(b, a) if (a, b) in back else (a, b) for a, b in ((t["from"], t["to"]) for t in routed)]
        layer_of = _layers(names, dag, terminal)
        self.nodes = {s["name"]: Node(s["name"], layer=layer_of[s["name"]], h=NODE_H, info=s,
                                      w=len(s["name"]) * CHAR_W + 2 * NODE_PAD) for s in self.statuses}
        nlayers = max(layer_of.values(), default=0) + 1
        layers: list[list[Node]] = [[] for _ in range(nlayers)]
        for n in names:
            layers[layer_of[n]].append(self.nodes[n])
        links: list[tuple[Node, Node]] = []
        self.chains: dict[tuple[str, str], list[Node]] = {}
        for a, b in dag:
            chain = [self.nodes[a]]
            for li in range(layer_of[a] + 1, layer_of[b]):
                v = Node(f"{a}->{b}@{li}", virtual=True, layer=li)
                layers[li].append(v)
                chain.append(v)
            chain.append(self.nodes[b])
            links += list(zip(chain, chain[1:], strict=False))
            self.chains[(a, b)] = chain
        _order(layers, links)
        self.layers = layers
        self.paths = [self._chain(t) for t in routed]
        ports: dict[tuple[str, str], int] = {}
        for chain in self.paths:
            for end, side in ((chain[0], self._side(chain, 0)), (chain[-1], self._side(chain, -1))):
                ports[(end.name, side)] = ports.get((end.name, side), 0) + 1
        for (name, _), k in ports.items():
            self.nodes[name].h = max(self.nodes[name].h, k * PORT_GAP + 12)
        self._place()
        self.labels: list[Box] = []
        self.ports = self._ports()
        self.routes = [self._route(t, i) for i, t in enumerate(routed)]
        self.bus_routes = self._bus()

    def _chain(self, t: Mapping[str, Any]) -> list[Node]:
        a, b = t["from"], t["to"]
        if (a, b) in self.reversed:
            return self.chains[(b, a)][::-1]
        return self.chains[(a, b)]

    @staticmethod
    def _side(chain: Sequence[Node], end: int) -> str:
        """Which side of the status at ``chain[end]`` the edge attaches to."""
        node, other = (chain[0], chain[1]) if end == 0 else (chain[-1], chain[-2])
        return "right" if other.layer > node.layer else "left"

    def _ports(self) -> dict[tuple[int, int], float]:
        """(path index, 0 for start or -1 for end) -> the y where the edge meets its status.

        Edges on one side of a status are spread out and sorted by where they go next, so they
        leave the status without crossing each other."""
        groups: dict[tuple[str, str], list[tuple[float, int, int, int]]] = {}
        for i, chain in enumerate(self.paths):
            for end in (0, -1):
                node = chain[end]
                nxt = chain[1] if end == 0 else chain[-2]
                tie = 0 if end == 0 else 1
                groups.setdefault((node.name, self._side(chain, end)), []).append((nxt.cy, tie, i, end))
        out: dict[tuple[int, int], float] = {}
        for (name, _), items in groups.items():
            node = self.nodes[name]
            items.sort()
            k = len(items)
            for j, (_, _, i, end) in enumerate(items):
                out[(i, end)] = node.cy + (j - (k - 1) / 2) * PORT_GAP
        return out

    def _place(self) -> None:
        x = MARGIN + 18  # room for the start marker
        heights = []
        for layer in self.layers:
            heights.append(sum(n.h + ROW_GAP if not n.virtual else VIRTUAL_GAP for n in layer))
        tallest = max(heights, default=0)
        for layer, height in zip(self.layers, heights, strict=True):
            width = max((n.w for n in layer if not n.virtual), default=0.0)
            y = MARGIN + (tallest - height) / 2
            for n in layer:
                if n.virtual:
                    n.x, n.y, n.w = x + width / 2, y + VIRTUAL_GAP / 2, 0.0
                    y += VIRTUAL_GAP
                else:
                    n.x, n.y = x, y + ROW_GAP / 2
                    y += n.h + ROW_GAP
            x += width + LAYER_GAP
        self.width = x - LAYER_GAP + MARGIN
        self.height = MARGIN * 2 + tallest

    def _free(self, box: Box) -> bool:
        if any(box.overlaps(Box(n.x, n.y, n.w, n.h), 3) for n in self.nodes.values()):
            return False
        return not any(box.overlaps(o) for o in self.labels)

    def _place_label(self, points: Sequence[tuple[float, float]], text: str) -> tuple[float, float]:
        w = len(text) * LABEL_CHAR_W + 6
        spots = [0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78, 0.15, 0.85]
        for dy in (0.0, -9.0, 9.0, -16.0, 16.0):
            for u in spots:
                x, y = _along(points, u)
                box = Box(x - w / 2, y + dy - LABEL_H / 2, w, LABEL_H)
                if self._free(box):
                    self.labels.append(box)
                    return x, y + dy
        x, y = _along(points, 0.5)
        self.labels.append(Box(x - w / 2, y - LABEL_H / 2, w, LABEL_H))
        return x, y

    def _route(self, t: Mapping[str, Any], i: int) -> dict[str, Any]:
        chain = self.paths[i]
        src, dst = chain[0], chain[-1]
        sx = src.x + src.w if self._side(chain, 0) == "right" else src.x
        ex = dst.x + dst.w if self._side(chain, -1) == "right" else dst.x
        points = [(sx, self.ports[(i, 0)]), *[(v.cx, v.cy) for v in chain[1:-1]], (ex, self.ports[(i, -1)])]
        label = _label(t)
        lx, ly = self._place_label(points, label)
        return {"t": t, "d": _path_d(points), "label": label, "lx": lx, "ly": ly,
                "back": (t["from"], t["to"]) in self.reversed}

    def _bus(self) -> list[dict[str, Any]]:
        if not self.bus:
            return []
        init = self.nodes[self.initial]
        srcs = [self.nodes[t["from"]] for t in self.bus]
        labels = [_label(t) for t in self.bus]
        xb = max(n.x + n.w + len(lbl) * LABEL_CHAR_W + 24 for n, lbl in zip(srcs, labels, strict=True))
        yb = max(n.y + n.h for n in self.nodes.values() if not n.virtual) + BUS_GAP
        self.width = max(self.width, xb + MARGIN)
        self.height = max(self.height, yb + MARGIN)
        out = []
        for t, n, lbl in zip(self.bus, srcs, labels, strict=True):
            d = f"M{n.x + n.w:.1f},{n.cy:.1f} H{xb:.1f} V{yb:.1f} H{init.cx:.1f} V{init.y + init.h:.1f}"
            out.append({"t": t, "d": d, "label": lbl, "lx": n.x + n.w + 8, "ly": n.cy - 5})
        return out


COLORS = {"fill": "#ffffff", "terminal": "#eef1f5", "waiting": "#fff8e1", "leased": "#e8f3ff", "stroke": "#57606a",
          "edge": "#6e7781", "text": "#1f2328", "label": "#424a53"}


def render_state_svg(spec: Mapping[str, Any]) -> str:
    """An ``<svg>`` element (inline, no external references) for ``doc['spec']``."""
    lay = Layout(spec["statuses"], spec["transitions"])
    w, hgt = lay.width, lay.height + 26
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="state-machine" viewBox="0 0 {w:.0f} {hgt:.0f}" '
           f'width="{w:.0f}" height="{hgt:.0f}" role="img" aria-labelledby="sm-title" '
           f'font-family="system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif">',
           f'<title id="sm-title">State machine of {h(spec["name"])} {h(spec["version"])}: '
           f'{len(spec["statuses"])} statuses, {len(spec["transitions"])} transitions</title>',
           '<defs><marker id="sm-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{COLORS["edge"]}"/></marker></defs>']
    for r in [*lay.routes, *lay.bus_routes]:
        t = r["t"]
        dash = ' stroke-dasharray="5 4"' if t["requeue"] else ""
        out.append(f'<g class="sm-edge" data-from="{h(t["from"])}" data-to="{h(t["to"])}">'
                   f'<title>{h(t["from"])} → {h(t["to"])} via {h(r["label"])}</title>'
                   f'<path d="{r["d"]}" fill="none" stroke="{COLORS["edge"]}" stroke-width="1.4"{dash} '
                   f'marker-end="url(#sm-arrow)"/></g>')
    for r in [*lay.routes, *lay.bus_routes]:
        anchor = "start" if r in lay.bus_routes else "middle"
        out.append(f'<text class="sm-label" x="{r["lx"]:.1f}" y="{r["ly"] + 4:.1f}" text-anchor="{anchor}" '
                   f'font-size="11" fill="{COLORS["label"]}" stroke="#ffffff" stroke-width="4" '
                   f'stroke-linejoin="round" paint-order="stroke">{h(r["label"])}</text>')
    for s in lay.statuses:
        n = lay.nodes[s["name"]]
        kind = "terminal" if s["terminal"] else "waiting" if s["waiting"] else "leased" if s["leased"] else "fill"
        classes = "sm-status" + (" terminal" if s["terminal"] else "") + (" initial" if s["initial"] else "")
        out.append(f'<g class="{classes}" data-status="{h(n.name)}"><title>{h(n.name)}: {h(s["description"])}</title>')
        out.append(f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w:.1f}" height="{n.h:.1f}" rx="9" '
                   f'fill="{COLORS[kind]}" stroke="{COLORS["stroke"]}" stroke-width="1.3"/>')
        if s["terminal"]:
            out.append(f'<rect x="{n.x + 3:.1f}" y="{n.y + 3:.1f}" width="{n.w - 6:.1f}" height="{n.h - 6:.1f}" '
                       f'rx="7" fill="none" stroke="{COLORS["stroke"]}" stroke-width="1"/>')
        weight = "600" if s["terminal"] else "500"
        out.append(f'<text x="{n.cx:.1f}" y="{n.cy + 4.5:.1f}" text-anchor="middle" font-size="13" '
                   f'font-weight="{weight}" fill="{COLORS["text"]}">{h(n.name)}</text></g>')
        if s["initial"]:
            out.append(f'<circle class="sm-start" cx="{n.x - 22:.1f}" cy="{n.cy:.1f}" r="5" fill="{COLORS["text"]}"/>'
                       f'<path d="M{n.x - 17:.1f},{n.cy:.1f} H{n.x - 1:.1f}" stroke="{COLORS["text"]}" '
                       f'stroke-width="1.4" marker-end="url(#sm-arrow)"/>')
    ly = hgt - 12
    out.append(f'<text x="{MARGIN:.0f}" y="{ly:.0f}" font-size="11" fill="{COLORS["label"]}">● initial · '
               'double border: terminal · dashed: requeue · [guard] must hold · blue: leased · yellow: waiting</text>')
    out.append("</svg>")
    return "\n".join(out)
