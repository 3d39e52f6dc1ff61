"""Porcupine-like timelines of a safety history, as inline SVG (nothing fetched; works from file://).

One lane per process (worker, producer, monitor, operator), time left to right; each operation is
a bar from its invocation to its completion, coloured by its outcome (``ok``, ``refused``,
``indefinite``; one that never completed runs to the right edge, open-ended), labelled with the
operation and its item.  Every ``nemesis`` record is drawn from its ``fault`` name alone, so a
fault added later appears without a change here: a marker on a top ``nemesis`` lane labelled with
the name, and a line over the lane of the process it hit (over every lane when it names none of
them).  Faults that open a span (:data:`SPANS`: ``pause`` to ``resume``, ``partition`` to ``heal``,
the clock faults ``skew``, ``bump``, ``strobe`` and ``fast`` to ``clock_end``)
also shade their process's lane until the closing record.

The x axis is ordinal, as in Porcupine: every distinct instant (an invocation, a completion, a
fault) in view gets the same width, so an operation of a millisecond between two of a second
stays readable; the instants themselves label the axis.

For a chosen item, its operations are outlined; with the item's per-item linearizability result
(docs/safety.md, the ``linearizability`` object of ``history check --json``), the linearization
found is numbered on the bars, or the failing excerpt is outlined with the operation where every
ordering fails marked and the model's expected answer written beside it.

Bounded size: a timeline shows a window of :data:`CONTEXT_EVENTS` instants either side of the
operations it is about, at most :data:`MAX_BARS` operations (the nearest in time win, the rest
are counted); a whole-history timeline is refused over :data:`MAX_WHOLE_OPS` operations; a page
holds at most :data:`MAX_TIMELINES` timelines.  So a page stays a few megabytes at most, whatever
the history's size.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .text import h, one_line

MAX_BARS = 400  # operations drawn in one timeline
CONTEXT_EVENTS = 10  # instants shown either side of the operations a timeline is about
MAX_WHOLE_OPS = 5000  # a whole-history timeline is refused above this many operations
MAX_TIMELINES = 40  # timelines on one page (the rest of the failing items are listed)
SPANS = {"pause": "resume", "partition": "heal"}  # a fault that opens a span -> the fault that closes it
SPANS.update(dict.fromkeys(("skew", "bump", "strobe", "fast"), "clock_end"))  # clock faults (chaos/safety/clockfaults.py)
NEMESIS_LANE = "nemesis"

STEP = 18.0  # px per instant
LEFT = 120.0  # lane labels
TOP = 26.0  # axis
ROW_H = 22.0
BAR_H = 16.0
LANE_GAP = 6.0
FAULT_ROWS = 3  # fault labels are staggered over this many rows of the nemesis lane
FAULT_ROW_H = 15.0
RIGHT_PAD = 150.0  # room for the last labels and the expected-answer note
CHAR_W = 6.2  # 11px sans-serif, generous
ITEM_CHARS = 12  # a longer item identifier is shortened on the bars, to "…" and its last 8 characters
LABEL_MAX = 130.0  # px a bar is widened to for its label (longer labels are cut; the tooltip has all)
KNOWN_FAULT_COLOURS = {"kill": "#b3261e", "pause": "#7b5ea7", "resume": "#7b5ea7", "partition": "#c26a00",
                       "heal": "#c26a00", "reopen": "#00639b", "takeover": "#1b6e3a"}
PALETTE = ("#6d4c41", "#00838f", "#ad1457", "#455a64", "#827717", "#4527a0", "#2e7d32", "#d84315")

CSS = """
figure.timeline { margin: 1em 0 1.5em; }
figure.timeline .tl-scroll { overflow-x: auto; border: 1px solid #d0d4da; border-radius: 6px; background: #fff; }
figure.timeline svg { display: block; font: 11px system-ui, sans-serif; }
figure.timeline figcaption { font-size: 0.9em; margin-top: 0.4em; }
.tl-lane-label { font-weight: 600; fill: #333; }
.tl-lane { fill: #f6f7f9; }
.tl-bar rect.b { stroke: #0003; stroke-width: 1; }
.tl-bar.o-ok rect.b { fill: #a8d5a2; }
.tl-bar.o-refused rect.b { fill: #f2b8b5; }
.tl-bar.o-indefinite rect.b { fill: #f7d98b; }
.tl-bar.open rect.b { stroke-dasharray: 4 2; }
.tl-bar.dim { opacity: 0.45; }
.tl-bar.focus rect.b { stroke: #1a237e; stroke-width: 2; }
.tl-bar.excerpt rect.b { stroke: #b3261e; stroke-width: 2; }
.tl-bar.at rect.b { stroke: #b3261e; stroke-width: 3.5; }
.tl-bar text { fill: #111; }
.tl-num circle { fill: #1a237e; }
.tl-num text { fill: #fff; font-weight: 700; text-anchor: middle; }
.tl-bar text.tl-at-note { fill: #b3261e; font-weight: 700; }
.tl-axis text { fill: #666; font-size: 9px; }
.tl-axis line { stroke: #e3e6ea; }
.tl-fault line { stroke-width: 1.5; stroke-dasharray: 3 2; }
.tl-fault text { font-weight: 600; }
.tl-span { opacity: 0.16; }
.tl-break line { stroke: #9aa0a6; stroke-width: 3; stroke-dasharray: 2 3; }
.tl-break text { fill: #5f6368; font-weight: 700; }
.tl-legend span { display: inline-block; padding: 0 0.5em; margin-right: 0.4em; border-radius: 3px; }
.tl-legend .l-ok { background: #a8d5a2; } .tl-legend .l-refused { background: #f2b8b5; }
.tl-legend .l-indefinite { background: #f7d98b; } .tl-legend .l-focus { outline: 2px solid #1a237e; }
.tl-legend .l-excerpt { outline: 2px solid #b3261e; }
.tl-note { color: #555; }
.tl-verdict-violation { color: #b3261e; font-weight: 700; }
"""


class TimelineError(Exception):
    """A timeline cannot be drawn as asked (one line: what and why)."""


# ------------------------------------------------------------------------------------ the data
@dataclass(slots=True)
class Bar:
    id: int
    process: str
    op: str
    item: str | None
    t0: float
    t1: float | None  # None: never completed
    outcome: str  # ok | refused | indefinite
    line: int = 0
    args: Any = None
    answer: Any = None  # the result (ok) or the error (refused / indefinite)


@dataclass(slots=True)
class Fault:
    fault: str
    t: float
    process: str | None
    point: Any = None
    line: int = 0
    end: float | None = None  # a span's closing instant (None: open to the right edge, or no span)


@dataclass
class Ops:
    """The operations and faults of a history (or of part of one), sorted by time."""

    bars: list[Bar] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    _index: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # built once, on first use

    def by_id(self) -> dict[int, Bar]:
        if "ids" not in self._index:
            self._index["ids"] = {b.id: b for b in self.bars}
        return self._index["ids"]  # type: ignore[no-any-return]

    def of_item(self, item: str) -> list[Bar]:
        if "items" not in self._index:
            by: dict[str, list[Bar]] = {}
            for b in self.bars:
                if b.item is not None:
                    by.setdefault(b.item, []).append(b)
            self._index["items"] = by
        return self._index["items"].get(item, [])  # type: ignore[no-any-return]

    def items(self) -> set[str]:
        self.of_item("")
        return set(self._index["items"])

    def times(self) -> list[float]:
        """Every instant (invocation, completion, fault), sorted."""
        if "times" not in self._index:
            self._index["times"] = sorted({b.t0 for b in self.bars} | {b.t1 for b in self.bars if b.t1 is not None}
                                          | {f.t for f in self.faults})
        return self._index["times"]  # type: ignore[no-any-return]

    def starts(self) -> list[float]:
        """Each operation's invocation instant, in the order of ``bars``."""
        if "starts" not in self._index:
            self._index["starts"] = [b.t0 for b in self.bars]
        return self._index["starts"]  # type: ignore[no-any-return]


def _get(rec: Any, name: str) -> Any:
    if isinstance(rec, Mapping):
        return rec.get(name)
    return getattr(rec, name, None)


def _kind(rec: Any) -> Any:
    if isinstance(rec, Mapping):
        return rec.get("type")
    return getattr(rec, "kind", None) or getattr(rec, "type", None)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def item_of(op: str, args: Any, outcome: str, answer: Any) -> str | None:
    """The item an operation is about: its ``work_id`` argument, else the work snapshot it answered
    (a claim's item, a create's)."""
    wid = args.get("work_id") if isinstance(args, Mapping) else None
    if wid is None and outcome == "ok" and isinstance(answer, Mapping):
        w = answer.get("work") if isinstance(answer.get("work"), Mapping) else answer
        if "status" in w and w.get("work_id") is not None:
            wid = w["work_id"]
    return None if wid is None else str(wid)


def collect(records: Any) -> Ops:
    """The operations and faults of a loaded :class:`~ledgercheck.chaos.safety.history.History`, or of an
    iterable of records (record objects or their JSON objects, as an anomaly's excerpt holds them)."""
    rows: Iterable[tuple[Any, int]]
    if hasattr(records, "rows") and hasattr(records, "line"):  # a History: read its rows, build nothing
        hist = records
        rows = ((r, hist.line(i)) for i, r in enumerate(hist.rows))
    else:
        rows = ((r, _get(r, "line") or 0) for r in records)
    invokes: dict[int, tuple[Any, int]] = {}
    completes: dict[int, Any] = {}
    faults: list[Fault] = []
    for rec, line in rows:
        kind = _kind(rec)
        if kind == "invoke":
            oid = _get(rec, "id")
            if isinstance(oid, int) and oid not in invokes:
                invokes[oid] = (rec, line)
        elif kind == "complete":
            oid = _get(rec, "id")
            if isinstance(oid, int):
                completes.setdefault(oid, rec)
        elif kind == "nemesis":
            t = _num(_get(rec, "t"))
            if t is not None:
                p = _get(rec, "process")
                faults.append(Fault(str(_get(rec, "fault")), t, None if p is None else str(p), _get(rec, "point"), line))
    bars = []
    for oid, (rec, line) in invokes.items():
        t0 = _num(_get(rec, "t"))
        if t0 is None:
            continue
        c = completes.get(oid)
        if c is None:
            t1, outcome, answer = None, "indefinite", None
        else:
            t1, outcome = _num(_get(c, "t")), str(_get(c, "outcome"))
            answer = _get(c, "result") if outcome == "ok" else _get(c, "error")
            if t1 is not None and t1 < t0:
                t1 = t0
        op, args = str(_get(rec, "op")), _get(rec, "args")
        bars.append(Bar(oid, str(_get(rec, "process")), op, item_of(op, args, outcome, answer), t0, t1, outcome,
                        line, args, answer))
    bars.sort(key=lambda b: (b.t0, b.id))
    faults.sort(key=lambda f: f.t)
    _close_spans(faults, {b.process for b in bars})
    return Ops(bars, faults)


def _close_spans(faults: list[Fault], lanes: set[str]) -> None:
    """Give each span-opening fault its end: the first closing fault after it naming the same process,
    else the first one naming no lane (a heal names the host's namespace, not each worker)."""
    for i, f in enumerate(faults):
        closer = SPANS.get(f.fault)
        if closer is None:
            continue
        loose = None
        for g in faults[i + 1:]:
            if g.fault == closer:
                if g.process == f.process:
                    f.end = g.t
                    break
                if loose is None and (g.process is None or g.process not in lanes):
                    loose = g.t
            elif g.fault == f.fault and g.process == f.process:
                break  # opened again before any close naming it
        if f.end is None:
            f.end = loose


# ---------------------------------------------------------------------------------- the window
@dataclass
class View:
    bars: list[Bar]
    faults: list[Fault]
    lo: float
    hi: float
    total: int  # operations in the history
    hidden: int  # operations in the windows' time ranges left out (over MAX_BARS)
    whole: bool
    breaks: list[tuple[float, float, int]] = field(default_factory=list)  # (after, before, operations skipped)


def window(ops: Ops, focus: Iterable[int] = (), *, item: str | None = None, whole: bool = False,
           context: int = CONTEXT_EVENTS, max_bars: int = MAX_BARS) -> View:
    """The part of ``ops`` a timeline shows: around the operations ``focus`` (ids; when none of them
    is in the history, the operations of ``item``), ``context`` instants either side, at most
    ``max_bars`` operations (those about the focus first, then the nearest to them in time).
    ``whole``: everything, refused over MAX_WHOLE_OPS."""
    bars = ops.bars
    if whole:
        if len(bars) > MAX_WHOLE_OPS:
            raise TimelineError(f"the history has {len(bars)} operations, over the {MAX_WHOLE_OPS} a whole-history "
                                "timeline draws; ask for one item instead")
        ts = [b.t0 for b in bars] + [b.t1 for b in bars if b.t1 is not None] + [f.t for f in ops.faults]
        lo, hi = (min(ts), max(ts)) if ts else (0.0, 0.0)
        return View(list(bars), _faults_in(ops.faults, lo, hi), lo, hi, len(bars), 0, True)
    index = ops.by_id()
    # what the timeline is about: the focus, else the item's operations
    key = sorted({index[i].id: index[i] for i in focus if i in index}.values(), key=lambda b: (b.t0, b.id))
    if not key and item is not None:
        key = list(ops.of_item(item))
    times = ops.times()
    if not key:
        if not times:
            return View([], [], 0.0, 0.0, len(bars), 0, False)
        key_lo = key_hi = times[0]
    else:
        key_lo = min(b.t0 for b in key)
        key_hi = max(b.t1 if b.t1 is not None else b.t0 for b in key)
    # one window per cluster of key operations (a new one where more than 2 x context instants
    # separate them), each widened by context instants either side; windows that meet are joined
    spans: list[list[float]] = []
    for b in key:
        end = b.t1 if b.t1 is not None else b.t0
        if spans and bisect.bisect_left(times, b.t0) - bisect.bisect_right(times, spans[-1][1]) <= 2 * context:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([b.t0, end])
    if not spans:
        spans = [[key_lo, key_hi]]
    wins: list[list[float]] = []
    for a, z in spans:
        i, j = bisect.bisect_left(times, a), bisect.bisect_right(times, z)
        w = [times[max(0, i - context)], max(z, times[min(len(times) - 1, j - 1 + context)])]
        if wins and w[0] <= wins[-1][1]:
            wins[-1][1] = max(wins[-1][1], w[1])
        else:
            wins.append(w)
    lo, hi = wins[0][0], wins[-1][1]

    def in_windows(b: Bar) -> bool:
        end = b.t1 if b.t1 is not None else hi  # never completed: it may take effect in any later window
        return any(w[0] <= end and b.t0 <= w[1] for w in wins)

    inside = [b for b in bars[:bisect.bisect_right(ops.starts(), hi)] if (b.t1 is None or b.t1 >= lo) and in_windows(b)]
    hidden = 0
    if len(inside) > max_bars:
        keyset = {id(b) for b in key}
        starts = [b.t0 for b in key]  # key is in time order, as bars are
        ends = [b.t1 if b.t1 is not None else b.t0 for b in key]

        def distance(b: Bar) -> float:
            """How far in time from the nearest operation the timeline is about (0: they overlap).  An
            operation that never completed counts from its invocation."""
            end = b.t1 if b.t1 is not None else b.t0
            k = bisect.bisect_left(starts, b.t0)
            return min((max(0.0, starts[n] - end, b.t0 - ends[n]) for n in (k - 1, k, k + 1) if 0 <= n < len(key)),
                       default=0.0)

        rest = sorted((b for b in inside if id(b) not in keyset), key=distance)
        keep = key[:max_bars] + rest[:max(0, max_bars - len(key))]
        hidden = len(inside) - len(keep)
        inside = sorted(keep, key=lambda b: (b.t0, b.id))
        # the range shrinks to what is drawn, so the axis does not stretch over left-out operations
        lo = min(b.t0 for b in inside)
        hi = max(max(b.t1 if b.t1 is not None else b.t0 for b in inside), key_hi)
    shown = {b.id for b in inside}
    breaks = []
    t0s = ops.starts()
    for a, z in zip(wins, wins[1:], strict=False):
        gap = [b for b in bars[bisect.bisect_right(t0s, a[1]):bisect.bisect_left(t0s, z[0])] if b.id not in shown]
        if gap:
            breaks.append((a[1], z[0], len(gap)))
    faults = [f for f in _faults_in(ops.faults, lo, hi)
              if any(w[0] <= f.t <= w[1] or (f.fault in SPANS and f.t <= w[1] and (f.end is None or f.end >= w[0]))
                     for w in wins)]
    return View(inside, faults, lo, hi, len(bars), hidden, False, breaks)


def _faults_in(faults: Sequence[Fault], lo: float, hi: float) -> list[Fault]:
    return [f for f in faults if lo <= f.t <= hi or (f.end is None and f.fault in SPANS and f.t < lo)
            or (f.end is not None and f.t < lo <= f.end)]


# ------------------------------------------------------------------------------------ drawing
_NUMERIC = re.compile(r"(\d+)")


def _lane_key(p: str) -> tuple[Any, ...]:
    return tuple(int(s) if s.isdigit() else s for s in _NUMERIC.split(p))


def fault_colour(name: str) -> str:
    """A fault's colour: fixed for the known ones, else chosen from its name (stable across runs)."""
    if name in KNOWN_FAULT_COLOURS:
        return KNOWN_FAULT_COLOURS[name]
    return PALETTE[sum(name.encode("utf-8", "replace")) % len(PALETTE)]


def _short(v: Any, limit: int = 160) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"), sort_keys=True)
    return one_line(s, limit)


def _fmt_t(t: float) -> str:
    return f"{t:.4f}".rstrip("0").rstrip(".") if abs(t) < 1e6 else f"{t:.6g}"


class _Scale:
    """Ordinal x: the distinct instants in view, in order, STEP apart, with the gap before an
    operation's completion widened until its label fits on its bar (at most LABEL_MAX px)."""

    def __init__(self, view: View, labels: Mapping[int, float] | None = None) -> None:
        ts = {b.t0 for b in view.bars} | {b.t1 for b in view.bars if b.t1 is not None}
        ts |= {f.t for f in view.faults if view.lo <= f.t <= view.hi}
        ts |= {f.end for f in view.faults if f.end is not None and view.lo <= f.end <= view.hi}
        ts |= {(a + z) / 2 for a, z, _ in view.breaks}  # a slot for each break between windows
        self.ts = sorted(ts) or [view.lo]
        index = {t: i for i, t in enumerate(self.ts)}
        gaps = [STEP] * len(self.ts)  # gaps[i]: from instant i - 1 to instant i
        spans = sorted((index[b.t1], index[b.t0], (labels or {}).get(b.id, 0.0)) for b in view.bars
                       if b.t1 is not None)
        xs = [0.0] * len(self.ts)
        done = 0  # xs is right up to this instant (gaps only grow at or after the end being fixed)
        for j, i, need in spans:
            while done <= j:
                xs[done] = (xs[done - 1] if done else 0.0) + gaps[done]
                done += 1
            short = need - (xs[j] - xs[i] + STEP * 0.8)
            if short > 0:
                gaps[j] += short
                for k in range(j, done):
                    xs[k] += short
        while done < len(self.ts):
            xs[done] = (xs[done - 1] if done else 0.0) + gaps[done]
            done += 1
        self.xs = [LEFT + x - STEP * 0.5 for x in xs]
        self.right = (self.xs[-1] if self.xs else LEFT) + STEP

    def x(self, t: float) -> float:
        ts, xs = self.ts, self.xs
        i = bisect.bisect_left(ts, t)
        if i < len(ts) and ts[i] == t:
            return xs[i]
        if i == 0:
            return xs[0] - STEP * 0.25
        if i >= len(ts):
            return self.right - STEP * 0.25
        a, b = ts[i - 1], ts[i]  # between two instants
        return xs[i - 1] + (xs[i] - xs[i - 1]) * (t - a) / (b - a)


def render_timeline(ops: Ops, *, focus: Iterable[int] = (), item: str | None = None,
                    result: Mapping[str, Any] | None = None, whole: bool = False, caption: str = "",
                    max_bars: int = MAX_BARS, context: int = CONTEXT_EVENTS) -> str:
    """One timeline as an HTML ``<figure>`` holding an inline SVG.

    ``focus``: operation ids the timeline is about (an anomaly's proof, outlined in red); ``item``: the item whose
    operations are outlined; ``result``: that item's linearizability result (``order`` numbered,
    or ``excerpt`` and ``at`` marked with ``expected``).  ``caption`` is text (escaped here)."""
    result = result if isinstance(result, Mapping) else None
    lin_ids: list[int] = []
    if result is not None:
        for k in ("order", "excerpt"):
            lin_ids += [i for i in result.get(k) or [] if isinstance(i, int)]
        if isinstance(result.get("at"), int):
            lin_ids.append(result["at"])
    view = window(ops, [*focus, *lin_ids], item=item, whole=whole, context=context, max_bars=max_bars)
    scale = _Scale(view, {b.id: min(LABEL_MAX, 8 + CHAR_W * len(_label(b))) for b in view.bars})
    order: dict[int, int] = {}
    excerpt: set[int] = set()
    at: int | None = None
    verdict = str(result.get("result")) if result is not None else None
    if result is not None:
        if verdict == "linearizable":
            order = {oid: n for n, oid in enumerate(result.get("order") or [], start=1) if isinstance(oid, int)}
        elif verdict == "violation":
            excerpt = {i for i in result.get("excerpt") or [] if isinstance(i, int)}
            at = result.get("at") if isinstance(result.get("at"), int) else None
    focus = set(focus)
    proof = {b.id for b in view.bars if b.id in focus}  # an anomaly's proof: outlined like a failing excerpt
    excerpt |= proof
    focus_ids = set(focus) | set(order) | excerpt | ({at} if at is not None else set())
    highlighted = {b.id for b in view.bars if (item is not None and b.item == item) or b.id in focus_ids}

    # lanes: each process with an operation in view, then the processes faults name, in natural order
    names = {b.process for b in view.bars}
    lanes = sorted(names, key=_lane_key)
    rows_of: dict[str, list[float]] = {p: [] for p in lanes}  # per lane, the right edge of each row
    placed: list[tuple[Bar, float, float, int]] = []
    for b in view.bars:
        x0 = scale.x(b.t0) - STEP * 0.4
        x1 = (scale.x(b.t1) + STEP * 0.4) if b.t1 is not None else scale.right
        rows = rows_of[b.process]
        for r, edge in enumerate(rows):
            if edge <= x0:
                rows[r] = x1
                break
        else:
            rows.append(x1)
            r = len(rows) - 1
        placed.append((b, x0, x1, r))
    y = TOP + FAULT_ROWS * FAULT_ROW_H + LANE_GAP * 2
    lane_y: dict[str, tuple[float, float]] = {}
    for p in lanes:
        hgt = max(1, len(rows_of[p])) * ROW_H
        lane_y[p] = (y, hgt)
        y += hgt + LANE_GAP
    height = y + 4
    width = scale.right + RIGHT_PAD
    out: list[str] = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width:.0f}" '
                      f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
                      f'aria-label="{h("timeline" + (" of item " + item if item else ""))}">']
    # axis: an instant label every few steps
    out.append('<g class="tl-axis">')
    last = -1e9
    for t, x in zip(scale.ts, scale.xs, strict=True):
        if x - last >= 60:
            last = x
            out.append(f'<line x1="{x:.1f}" y1="{TOP - 4:.1f}" x2="{x:.1f}" y2="{height:.1f}"/>'
                       f'<text x="{x:.1f}" y="{TOP - 8:.1f}" text-anchor="middle">{h(_fmt_t(t))}</text>')
    out.append("</g>")
    # lanes
    ny = TOP
    out.append(f'<text class="tl-lane-label" x="6" y="{ny + 12:.1f}">{h(NEMESIS_LANE)}</text>')
    for p in lanes:
        ly, lh = lane_y[p]
        out.append(f'<rect class="tl-lane" x="{LEFT:.1f}" y="{ly:.1f}" width="{scale.right - LEFT:.1f}" '
                   f'height="{lh:.1f}"/><text class="tl-lane-label" x="6" y="{ly + 15:.1f}">'
                   f'{h(one_line(p, 18))}<title>{h(p)}</title></text>')
    # fault spans (under the bars)
    for f in view.faults:
        if f.fault in SPANS and f.process in lane_y:
            ly, lh = lane_y[f.process]
            x0 = scale.x(max(f.t, view.lo)) if f.t >= view.lo else LEFT
            x1 = scale.x(f.end) if f.end is not None and f.end <= view.hi else scale.right
            out.append(f'<rect class="tl-span" data-span="{h(f.fault)}" data-process="{h(f.process)}" '
                       f'x="{x0:.1f}" y="{ly:.1f}" width="{max(2.0, x1 - x0):.1f}" height="{lh:.1f}" '
                       f'fill="{fault_colour(f.fault)}"><title>{h(_fault_title(f))}</title></rect>')
    # bars
    for b, x0, x1, r in placed:
        ly, _ = lane_y[b.process]
        by = ly + r * ROW_H + (ROW_H - BAR_H) / 2
        cls = ["tl-bar", f"o-{b.outcome}" if b.outcome in ("ok", "refused", "indefinite") else "o-indefinite"]
        if b.t1 is None:
            cls.append("open")
        if b.id in highlighted:
            cls.append("focus")
        elif highlighted:
            cls.append("dim")
        if b.id in excerpt:
            cls.append("excerpt")
        if b.id == at:
            cls.append("at")
        label = _label(b)
        w = x1 - x0
        out.append(f'<g class="{" ".join(cls)}" data-op="{b.id}" data-outcome="{h(b.outcome)}" '
                   f'data-item="{h(b.item or "")}"><title>{h(_bar_title(b))}</title>'
                   f'<svg x="{x0:.1f}" y="{by:.1f}" width="{w:.1f}" height="{BAR_H:.1f}">'
                   f'<rect class="b" x="0.5" y="0.5" width="{max(1.0, w - 1):.1f}" height="{BAR_H - 1:.1f}" rx="3"/>'
                   f'<text x="4" y="{BAR_H - 4:.1f}">{h(one_line(label, 60))}</text></svg>')
        if b.id in order:
            cx = x0 + 1
            out.append(f'<g class="tl-num" data-order="{order[b.id]}"><circle cx="{cx:.1f}" cy="{by:.1f}" r="7"/>'
                       f'<text x="{cx:.1f}" y="{by + 3.5:.1f}">{order[b.id]}</text></g>')
        if b.id == at:
            note = f"every ordering fails here; the model expected: {result.get('expected')}" if result else ""
            out.append(f'<text class="tl-at-note" data-at="{b.id}" x="{x1 + 4:.1f}" y="{by + BAR_H - 4:.1f}">'
                       f'✗ {h(one_line(note, 140))}</text>')
        out.append("</g>")
    # breaks between windows: the operations left out there, counted
    for a, z, n in view.breaks:
        x = scale.x((a + z) / 2)
        out.append(f'<g class="tl-break" data-skipped="{n}"><title>{n} operations between t {h(_fmt_t(a))} and '
                   f'{h(_fmt_t(z))} not shown</title><line x1="{x:.1f}" y1="{TOP - 4:.1f}" x2="{x:.1f}" '
                   f'y2="{height:.1f}"/><text x="{x:.1f}" y="{TOP + FAULT_ROWS * FAULT_ROW_H:.1f}" '
                   f'text-anchor="middle">⋯ {n}</text></g>')
    # fault markers: the nemesis lane, and a line over the lane hit (every lane when it names none)
    for n, f in enumerate(f for f in view.faults if view.lo <= f.t <= view.hi):
        x = scale.x(f.t)
        colour = fault_colour(f.fault)
        fy = TOP + (n % FAULT_ROWS) * FAULT_ROW_H
        if f.process in lane_y:
            ly, lh = lane_y[f.process]
        else:
            ly, lh = TOP + FAULT_ROWS * FAULT_ROW_H, height - (TOP + FAULT_ROWS * FAULT_ROW_H) - 4
        name = f.fault + (f" {f.process}" if f.process else "")
        out.append(f'<g class="tl-fault" data-fault="{h(f.fault)}" data-process="{h(f.process or "")}">'
                   f'<title>{h(_fault_title(f))}</title>'
                   f'<line x1="{x:.1f}" y1="{fy + 2:.1f}" x2="{x:.1f}" y2="{ly + lh:.1f}" stroke="{colour}"/>'
                   f'<circle cx="{x:.1f}" cy="{fy + 6:.1f}" r="3.5" fill="{colour}"/>'
                   f'<text x="{x + 5:.1f}" y="{fy + 10:.1f}" fill="{colour}">{h(one_line(name, 40))}</text></g>')
    out.append("</svg>")
    return ('<figure class="timeline"' + (f' data-item="{h(item)}"' if item is not None else "")
            + (f' data-result="{h(verdict)}"' if verdict else "") + f' data-bars="{len(view.bars)}">'
            + f'<div class="tl-scroll">{"".join(out)}</div><figcaption>{_caption(view, caption, item, result, bool(excerpt))}'
            + "</figcaption></figure>")


def short_item(item: str) -> str:
    """An item as a bar's label shows it: a long identifier by its last characters (the tooltip and
    the section heading have it whole)."""
    return item if len(item) <= ITEM_CHARS else "…" + item[-(ITEM_CHARS - 4):]


def _label(b: Bar) -> str:
    return one_line(f"{b.op} {short_item(b.item)}" if b.item is not None else b.op, 60)


def _bar_title(b: Bar) -> str:
    end = _fmt_t(b.t1) if b.t1 is not None else "never completed"
    answer = "" if b.answer is None else f" → {_short(b.answer)}"
    where = f" (line {b.line})" if b.line else ""
    return f"#{b.id} {b.process} {b.op} {_short(b.args)}: {b.outcome}{answer}; t {_fmt_t(b.t0)} … {end}{where}"


def _fault_title(f: Fault) -> str:
    span = ""
    if f.fault in SPANS:
        span = f" until {_fmt_t(f.end)} ({SPANS[f.fault]})" if f.end is not None else f" (no {SPANS[f.fault]} recorded)"
    point = "" if f.point is None else f" at {_short(f.point, 80)}"
    where = f" (line {f.line})" if f.line else ""
    return f"{f.fault} {f.process or ''}{point} t {_fmt_t(f.t)}{span}{where}"


def _caption(view: View, caption: str, item: str | None, result: Mapping[str, Any] | None,
             outlined: bool = False) -> str:
    parts = []
    if caption:
        parts.append(f"<p>{h(caption)}</p>")
    if result is not None:
        r = str(result.get("result"))
        if r == "linearizable":
            parts.append(f"<p>Item {h(item)}: linearizable; the numbers on the bars are the order found "
                         f"({len(result.get('order') or [])} operations).</p>")
        elif r == "violation":
            parts.append(f'<p class="tl-verdict-violation">Item {h(item)}: not linearizable. Outlined in red, the '
                         f"shortest excerpt no ordering explains; at operation #{h(result.get('at'))} every "
                         f"ordering fails, where the model expected: {h(result.get('expected'))}.</p>")
        else:
            parts.append(f"<p>Item {h(item)}: {h(r)}{': ' + h(result.get('reason')) if result.get('reason') else ''}"
                         ".</p>")
    span = f"t {h(_fmt_t(view.lo))} … {h(_fmt_t(view.hi))}"
    shown = (f"the whole history ({len(view.bars)} operations)" if view.whole
             else f"{len(view.bars)} of {view.total} operations, {span}")
    hidden = f"; {view.hidden} more in these time ranges left out (at most {MAX_BARS} drawn)" if view.hidden else ""
    if view.breaks:
        hidden += (f"; {len(view.breaks) + 1} windows, {sum(n for _, _, n in view.breaks)} operations between them "
                   "not shown (the dotted lines)")
    parts.append('<p class="tl-legend"><span class="l-ok">ok</span><span class="l-refused">refused</span>'
                 '<span class="l-indefinite">indefinite</span>'
                 + ('<span class="l-focus">this item</span>' if item is not None else "")
                 + ('<span class="l-excerpt">the proof / failing excerpt</span>' if outlined else "")
                 + f' <span class="tl-note">Shown: {shown}{h(hidden)}. Dashed bars never completed. Each instant '
                 "gets the same width (the axis is in order of time, not to scale); hover a bar or fault for "
                 "its record.</span></p>")
    return "".join(parts)


# ------------------------------------------------------------------------------------ the page
def failing_items(verdict: Any = None, lin: Mapping[str, Any] | None = None,
                  anomalies: Iterable[Mapping[str, Any]] = ()) -> dict[str, dict[str, Any]]:
    """Each failing item -> what failed there: ``anomalies`` (the class checker's, as JSON: those of
    ``verdict`` and ``anomalies``) and ``result`` (its linearizability result, when a violation)."""
    out: dict[str, dict[str, Any]] = {}
    for a in [*(verdict.anomalies if verdict is not None else []), *anomalies]:
        d = a.to_json() if hasattr(a, "to_json") else dict(a)
        out.setdefault(str(d.get("work_id")), {"anomalies": [], "result": None})["anomalies"].append(d)
    items = (lin or {}).get("items")
    for wid, r in (items.items() if isinstance(items, Mapping) else ()):
        if isinstance(r, Mapping) and r.get("result") == "violation":
            out.setdefault(str(wid), {"anomalies": [], "result": None})["result"] = r
    return out


def anomaly_ids(anomalies: Iterable[Mapping[str, Any]]) -> list[int]:
    """The operation ids an anomaly's excerpt (and context) names."""
    ids = []
    for a in anomalies:
        for r in [*(a.get("excerpt") or []), *(a.get("context") or [])]:
            if isinstance(r, Mapping) and r.get("type") in ("invoke", "complete") and isinstance(r.get("id"), int):
                ids.append(r["id"])
    return ids


def item_sections(ops: Ops, failing: Mapping[str, Mapping[str, Any]], lin: Mapping[str, Any] | None = None,
                  extra: Sequence[str] = (), limit: int = MAX_TIMELINES) -> str:
    """A ``<section>`` per item: every failing item, then ``extra`` items asked for, at most ``limit``."""
    items = list(failing) + [i for i in extra if i not in failing]
    lin_items = (lin or {}).get("items") or {}
    out = []
    for n, wid in enumerate(items):
        if n >= limit:
            rest = items[n:]
            out.append(f'<p class="tl-note" id="timelines-left-out">{len(rest)} more item(s) not drawn (at most {limit} '
                       f'timelines a page): {h(one_line(", ".join(rest), 2000))}</p>')
            break
        f = failing.get(wid) or {}
        anomalies = f.get("anomalies") or []
        lines = [f"{a.get('class')}: {a.get('explanation')}" for a in anomalies]
        result = lin_items.get(wid) if isinstance(lin_items.get(wid), Mapping) else None
        fig = render_timeline(ops, focus=anomaly_ids(anomalies), item=wid, result=result)
        why = "".join(f"<li>{h(line)}</li>" for line in lines)
        out.append(f'<section class="tl-item" data-item="{h(wid)}"><h3>Item <code>{h(wid)}</code></h3>'
                   + (f"<ul>{why}</ul>" if why else "") + fig + "</section>")
    return "".join(out)


# How a history file is read: reports import nothing of chaos (tests/spec/test_import_cycles.py),
# so chaos.history registers its loader here when it is imported (every run that made a history,
# and the command line, import it); without one, a report draws an anomaly from its proof alone.
_history_loader: Any = None


def register_history_loader(load: Any) -> None:
    global _history_loader
    _history_loader = load


def history_loader() -> Any:
    return _history_loader


def render_page(history: Any, verdict: Any = None, lin: Mapping[str, Any] | None = None, *,
                items: Sequence[str] = (), whole: bool = False, verdict_text: str | None = None) -> str:
    """A self-contained HTML page of timelines for a history: the whole history (``whole``), each
    failing item, and the ``items`` asked for.  Raises TimelineError for an item the history does
    not have, or a whole history over the limit."""
    ops = collect(history)
    known = ops.items() | set((lin or {}).get("items") or {})
    for wid in items:
        if wid not in known:
            raise TimelineError(f"no operation of item {wid!r} in the history")
    failing = failing_items(verdict, lin)
    meta = getattr(history, "meta", None)
    adapter = (meta.adapter.get("name") or meta.adapter.get("address")) if meta is not None else None
    path = getattr(history, "path", "history")
    body = [f"<h1>Timelines of <code>{h(path)}</code></h1>",
            f"<p>Adapter {h(adapter or '?')}; {len(ops.bars)} operations, {len(ops.faults)} nemesis records, "
            f"{len(ops.items())} items.</p>"]
    if verdict_text is not None:  # the caller's words for the verdict (reports import nothing of chaos)
        body.append(f'<p id="verdict">{h(verdict_text)}</p>')
    if lin is not None:
        s = lin.get("stats") or {}
        body.append(f'<p id="linearizability">Linearizability: {h(s.get("linearizable", "?"))} items linearizable, '
                    f'{h(s.get("violations", "?"))} violations, {h(s.get("unchecked", "?"))} unchecked.</p>')
    if whole:
        body.append('<section id="whole"><h2>The whole history</h2>' + render_timeline(ops, whole=True) + "</section>")
    if failing or items:
        body.append('<section id="items"><h2>Failing items' + (" and items asked for" if items else "") + "</h2>"
                    + item_sections(ops, failing, lin, items) + "</section>")
    elif not whole:
        body.append("<p>No failing item: nothing to draw (ask for an item, or the whole history).</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
            "img-src data:; base-uri 'none'; form-action 'none'\">\n"
            f"<title>{h('ledgercheck timelines: ' + str(path))}</title>\n"
            "<style>body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; } code { font-size: 0.95em; }"
            f"{CSS}</style>\n</head>\n<body>\n{''.join(body)}\n</body>\n</html>\n")
