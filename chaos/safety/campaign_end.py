"""The safety campaign's controller, listening and ending: the processes' events, the quiet period,
the stop, the final read, the merged history, and closing every process."""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Mapping
from multiprocessing.connection import wait as wait_conns
from typing import Any

from ledgercheck.chaos.crash.points import ChaosError
from ledgercheck.services.reaper import gone

from . import nemesis
from .campaign_model import _PART, MOVING_S, OPS0, STALL_CAP, _Proc
from .history import merge_histories, process_path
from .sink import EffectSink


class _Ending:
    """Part of the campaign's controller (chaos/safety/campaign.py ``_Campaign``)."""

    def _pump(self, timeout: float) -> None:
        live = [p for p in self.procs if not p.dead]
        by_conn = {id(p.conn): p for p in live}
        try:
            ready = wait_conns([p.conn for p in live], timeout)
        except OSError:
            ready = []
        for c in ready:
            proc = by_conn.get(id(c))
            if proc is None or proc.dead:
                continue
            try:
                # handling an earlier message may have read this one already: never block here
                if not c.poll():
                    continue
                msg = c.recv()
            except (EOFError, OSError):
                if proc.starting:
                    self._start_failed(proc, f"campaign process {proc.name} died while starting")
                else:
                    self._died(proc)
                continue
            if proc.starting:
                if msg.get("event") == "ready":
                    self._started(proc)
                    continue
                if msg.get("event") == "error":
                    self._start_failed(proc, f"{proc.name}: {msg.get('message')}")
                    continue
            self._event(proc, msg)

    def _died(self, proc: _Proc) -> None:
        proc.dead = True
        if proc.role == "reopen":
            return
        self.notes.append(f"{proc.name} exited without being killed")
        if proc.slot >= 0:
            self.flags[proc.slot] = 0
        if proc.role == "worker":
            self._replace()

    def _event(self, proc: _Proc, msg: Mapping[str, Any]) -> None:
        ev = msg.get("event")
        if ev == "created":
            if msg.get("work_id"):
                self.created[str(msg["work_id"])] = str(msg.get("source_id"))
        elif ev == "produced":
            self.produced = True
        elif ev == "crash_point":
            proc.armed = None  # it stopped at the point and waits there: a real crash follows
            self._kill(proc, str(msg.get("point")))
        elif ev == "note" or ev == "error":
            self.notes.append(f"{proc.name}: {msg.get('message')}")
        elif ev == "stopped":
            proc.stopped = True
        elif ev == "opened":  # a reopen process opened the ledger: it leaves
            if not msg.get("ok"):
                self.notes.append(f"reopen: {proc.name}: reset on the shared ledger failed: {msg.get('message')}")
            proc.conn.send({"cmd": "exit"})
            proc.dead = True
        elif ev == "killed":
            self._record("kill", msg.get("process"))
            self.counts["replaced"] += 1
        elif ev == "paused":
            name = str(msg.get("process"))
            self._record("pause", name)
            key = bytes.fromhex(msg["key"]) if msg.get("key") else b""
            if not (key and self._plan_takeover(name, name, key, int(msg.get("slot", -1)))):
                self.resumes.append((time.monotonic() + self.pause_s, name))
        elif ev == "fault_skipped":
            self.notes.append(f"{msg.get('fault')} skipped: no worker to do it to")
        elif "reply" in msg:
            proc.replies[str(msg["reply"])] = msg

    def _ask(self, proc: _Proc, cmd: str, timeout: float = 60.0, **args: Any) -> Mapping[str, Any]:
        proc.replies.pop(cmd, None)
        proc.conn.send({"cmd": cmd, **args})
        end = time.monotonic() + timeout
        while cmd not in proc.replies:
            if proc.dead or time.monotonic() > end:
                raise ChaosError(f"{proc.name} did not answer {cmd} within {timeout:g}s")
            self._pump(0.05)
        return proc.replies.pop(cmd)

    def _left(self) -> dict[str, int]:
        """The census: items by status that are neither terminal nor quarantined."""
        counts = self._ask(self.monitor, "count")["counts"]
        terminal = set(self.spec.terminal_statuses) | {"quarantined"}
        return {k: n for k, n in sorted(counts.items()) if k not in terminal and n}

    def _quiet(self, started: float) -> None:
        q0 = time.monotonic()
        min_q = self.lapse_real * 1.3 + 0.2
        max_q = min_q + 3 * self.lapse_real + 3.0
        operator_done = self.declared.reclaim != "operator"
        self.recovery = {"path": self.declared.reclaim, "actions": [],
                         "monitor": self.monitor_ops if self.declared.reclaim == "lease" else []}
        last = 0.0
        left: dict[str, int] | None = None
        fewest: int | None = None  # the fewest items left at any census: fewer is progress
        self.moved = q0
        while True:
            self._pump(0.05)
            now = time.monotonic()
            el = now - q0
            if not operator_done and el >= self.lapse_real * 1.2:
                self.recovery["actions"] = list(self._ask(self.monitor, "operator")["actions"] or [])
                operator_done = True
            # still moving: items finished within the last window of the period's own length (up to
            # STALL_CAP times it), so a busy machine's slow end is waited for and stuck work is not
            moving = now - self.moved < max(MOVING_S, max_q) and el < max_q * STALL_CAP
            if (el >= max_q or now - started > self.p.time_limit) and not moving:
                left = self._left() if left is None or el >= max_q else left
                if not left:
                    return
                what = ", ".join(f"{k} {n}" for k, n in left.items())
                n = sum(left.values())
                self.notes.append(f"quiet period ended after {el:.1f}s with work left ({what})")
                self.missing.append(f"the quiet period ended after {el:.1f}s with {n} item{'s' if n != 1 else ''} "
                                    f"not finished ({what}): the run did not reach its end state")
                return
            if operator_done and el >= min_q and time.monotonic() - last > 0.15:
                last = time.monotonic()
                left = self._left()
                if not left:
                    return
                n_left = sum(left.values())
                if fewest is None or n_left < fewest:
                    fewest, self.moved = n_left, last
            if self.progress is not None:
                self.progress(0, None, {"phase": "quiet", "created": len(self.created), **self.counts})

    def _stop(self) -> None:
        self._ready([p for p in self.procs if p.starting and not p.dead])  # a late newcomer: told to go first
        for p in self.procs:
            if p.role == "reopen" and not p.dead:  # a spare that was not needed (or one opening still)
                p.conn.send({"cmd": "exit"})
                p.dead = True
        order = [p for p in self.procs if not p.dead and p is not self.monitor] + [self.monitor]
        for proc in order:
            proc.conn.send({"cmd": "stop"})
        end = time.monotonic() + 30.0
        while any(not p.stopped for p in order if not p.dead):
            if time.monotonic() > end:
                for p in order:
                    if not p.stopped and not p.dead and p is not self.monitor:
                        self.notes.append(f"{p.name} did not stop; killed")
                        nemesis.kill(p.pid)
                        p.dead = True
                break
            self._pump(0.05)
        self.ops_done = sum(struct.unpack_from("<Q", self.flags, OPS0 + 8 * i)[0] for i in range(self.n_slots + 1))

    def _final(self) -> dict[str, int]:
        reply = self._ask(self.monitor, "final", ids=sorted(self.created))
        items = reply["items"]
        if self.writer is not None:
            self.recovery["now"] = reply.get("now")
            self.writer.write({"type": "final", "t": self.writer.t(), "items": items, "recovery": self.recovery})
        out: dict[str, int] = {}
        for w in items.values():
            k = "missing" if w is None else ("quarantined" if w.get("quarantined") else str(w.get("status")))
            out[k] = out.get(k, 0) + 1
        return dict(sorted(out.items()))

    def _finish_history(self) -> str | None:
        for proc in self.procs:
            if not proc.dead:
                try:
                    proc.conn.send({"cmd": "exit"})
                except OSError:
                    pass
        if self.writer is None:
            return None
        self._missing_effects()
        self.writer.close()
        files = [str(process_path(self.out, "nemesis"))] + [
            os.path.join(self.out, n) for n in sorted(os.listdir(self.out))
            if _PART.fullmatch(n) and n != "history.nemesis.jsonl"]
        path = os.path.join(self.out, "history.jsonl")
        merge_histories(files, path)
        for f in files:
            os.unlink(f)
        return path

    def _missing_effects(self) -> None:
        """Effects a killed worker applied but could not record (killed between the provider's
        answer and its own history write): the sink knows them; recorded here, at their time."""
        import orjson

        seen: set[int] = set()
        for n in os.listdir(self.out):
            if not _PART.fullmatch(n):
                continue
            with open(os.path.join(self.out, n), "rb") as fh:
                for raw in fh:
                    if b'"effect"' in raw:
                        try:
                            obj = orjson.loads(raw)
                        except orjson.JSONDecodeError:
                            continue
                        if obj.get("type") == "effect" and isinstance(obj.get("seq"), int):
                            seen.add(obj["seq"])
        sink = EffectSink(self.sink_path, self.spec)
        try:
            rows = sink.conn.execute("SELECT seq, key, work_id, applied, worker, wall FROM submission ORDER BY seq").fetchall()
        finally:
            sink.close()
        counts: dict[str, int] = {}
        assert self.writer is not None
        for seq, key, wid, applied, worker, wall in rows:
            if applied:
                counts[key] = counts.get(key, 0) + 1
            if seq in seen:
                continue
            self.writer.write({"type": "effect", "process": worker, "work_id": wid, "key": key, "applied": bool(applied),
                               "count": counts.get(key, 0), "t": round(wall - self.wall0, 6), "seq": seq,
                               "from_sink": True})

    def close(self) -> None:
        for _, host in self.heals:  # an error in the middle of a partition: leave the hosts connected
            self.p.hosts.heal(host)
        self.heals.clear()
        for proc in self.procs:
            if not proc.dead:
                try:
                    if proc.paused:
                        nemesis.resume(proc.pid)
                    proc.conn.send({"cmd": "exit"})
                except OSError:
                    pass
        end = time.monotonic() + 3.0
        for proc in self.procs:
            if proc.dead:
                continue
            while time.monotonic() < end:
                try:
                    os.kill(proc.pid, 0)
                except ProcessLookupError:
                    break
                if gone(proc.pid):
                    break
                time.sleep(0.01)
            else:
                nemesis.kill(proc.pid)
            proc.dead = True
        if self.writer is not None:
            self.writer.close()
        try:
            self.flags.close()
        except (AttributeError, ValueError):
            pass
        shutil.rmtree(self.work, ignore_errors=True)
