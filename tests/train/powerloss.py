#!/usr/bin/env python3
"""powerloss.py: replays a log of tests/train/powerloss_shim.c and checks every file-system state a
power cut could have left, by rerunning `framechain train` on each.

The rules (ALICE's, Pillai et al., OSDI 2014, for a file system that promises only what POSIX does):
a file's data is durable once the file is fsynced; a name (create, mkdir, rename, unlink) once its
folder is fsynced; anything else may or may not have reached the disk. So at a crash point each
folder holds its names as of its last fsync plus any subset of the name changes since, and each
file its bytes as of its last fsync plus a prefix of the writes since, torn at any 4 KiB boundary,
or the size without the bytes (zeros).

States per crash point (a bounded, meaningful choice, deduplicated): everything since the last
fsyncs lost; everything kept (what kill -9 leaves); every name kept but the unsynced data lost, or
zeroed; each file's unsynced data torn at a few 4 KiB boundaries (mid-line for small files); every
subset of a folder's unsynced name changes (prefixes and single drops when there are more than 4),
with the data kept.

"Promised" (what a rerun must resume from at least): the newest checkpoint whose writer finished its
whole protocol before the crash point: the fsync of the folder after the rename that named it, by
the same thread (with fault injection, the place where the skipped fsync would have been: the
writer reports success from there on). A rerun passes when it exits 0 with a final checkpoint
byte-identical to the uninterrupted run's and resumed from a step at least the promised one; or,
when nothing was promised, when it refuses with one error line and a non-zero status.

    powerloss.py pick LOG STEP
        the fsync numbers (file, folder) of the checkpoint of STEP in the log's first process
    powerloss.py check --log LOG --work DIR --ref CKPT --final PATH --name NAME [--from-fault --expect-failures] -- CMD...
        CMD is the train command with @STATE@ where the state's root goes (--run @STATE@/run)
"""
import argparse
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading

PAGE = 4096
CKPT_RE = re.compile(r"(^|/)ckpt-(\d{8})\.safetensors$")


def parse_log(path):
    ops = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            ops.append((parts[0], int(parts[1]), int(parts[2]), parts[3:]))
    return ops


# ---------------------------------------------------------------------------------------------
# the model: inodes with durable and volatile contents


class Inode:
    def __init__(self, isdir):
        self.isdir = isdir
        if isdir:
            self.durable, self.vol = {}, {}  # name -> inode id
        else:
            self.durable, self.vol = b"", bytearray()
        self.pending = []  # folders: ("link", name, ino), ("unlink", name, ino), ("rename", a, b, ino); files: offsets


class Model:
    def __init__(self, data_path):
        self.inodes = {0: Inode(True)}  # 0: the root, there before the run, empty and durable
        self.next = 1
        self.fds = {}
        self.data = open(data_path, "rb")
        self.promised = 0
        self.renamed = {}  # tid -> step of a checkpoint renamed into place, its folder not yet fsynced

    def new(self, isdir):
        self.inodes[self.next] = Inode(isdir)
        self.next += 1
        return self.next - 1

    def lookup(self, path):
        """(folder inode, name) of a path relative to the root, in the volatile names."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        d = 0
        for p in parts[:-1]:
            d = self.inodes[d].vol.get(p)
            if d is None:
                raise SystemExit(f"powerloss.py: the log names {path}, but has not created {p}")
        return d, (parts[-1] if parts else None)

    def ino(self, path, remove=False):
        d, name = self.lookup(path)
        if name is None:
            return d
        if name not in self.inodes[d].vol:
            raise SystemExit(f"powerloss.py: the log names {path}, but has not created it")
        return self.inodes[d].vol.pop(name) if remove else self.inodes[d].vol[name]

    def link(self, path, ino):
        d, name = self.lookup(path)
        self.inodes[d].vol[name] = ino
        self.inodes[d].pending.append(("link", name, ino))

    def apply(self, op):
        """Apply one log operation; returns True when it changed what a crash could leave."""
        kind, pid, tid, f = op
        if kind == "mkdir":
            self.link(f[0], self.new(True))
        elif kind == "open":
            fd, path, created, truncated = int(f[0]), f[1], f[2] == "1", f[3] == "1"
            ino = self.new(False) if created else self.ino(path)
            if created:
                self.link(path, ino)
            if truncated:
                node = self.inodes[ino]
                node.vol = bytearray()
                node.pending.append(0)
            self.fds[(pid, fd)] = ino
            return created or truncated
        elif kind == "write":
            fd, off, n, at = int(f[0]), int(f[2]), int(f[3]), int(f[4])
            self.data.seek(at)
            buf = self.data.read(n)
            node = self.inodes[self.fds[(pid, fd)]]
            if len(node.vol) < off:
                node.vol.extend(bytes(off - len(node.vol)))
            node.vol[off:off + n] = buf
            node.pending.append(off)
        elif kind == "trunc":
            node = self.inodes[self.fds[(pid, int(f[0]))]]
            n = int(f[2])
            node.vol = node.vol[:n] + bytearray(max(0, n - len(node.vol)))
            node.pending.append(min(n, len(node.durable)))
        elif kind in ("fsync", "skipfsync"):
            ino = self.fds[(pid, int(f[0]))]
            node = self.inodes[ino]
            if kind == "fsync":
                node.durable = dict(node.vol) if node.isdir else bytes(node.vol)
                node.pending = []
            if node.isdir and tid in self.renamed:  # the writer's protocol ends here: it reports success
                self.promised = max(self.promised, self.renamed.pop(tid))
        elif kind == "close":
            self.fds.pop((pid, int(f[0])), None)
            return False
        elif kind == "rename":
            sd, sname = self.lookup(f[0])
            dd, dname = self.lookup(f[1])
            ino = self.ino(f[0], remove=True)
            self.inodes[dd].vol[dname] = ino
            if sd == dd:
                self.inodes[sd].pending.append(("rename", sname, dname, ino))
            else:
                self.inodes[sd].pending.append(("unlink", sname, ino))
                self.inodes[dd].pending.append(("link", dname, ino))
            m = CKPT_RE.search(f[1])
            if m:
                self.renamed[tid] = int(m.group(2))
        elif kind in ("unlink", "rmdir"):
            d, name = self.lookup(f[0])
            ino = self.ino(f[0], remove=True)
            self.inodes[d].pending.append(("unlink", name, ino))
        elif kind == "start":
            self.fds = {k: v for k, v in self.fds.items() if k[0] != pid}
            return False
        else:
            raise SystemExit(f"powerloss.py: cannot replay operation {kind} of the log ({' '.join(f)})")
        return True

    # ---- the states a crash here could leave ----

    def names(self, ino, subset=None):
        """A folder's names after applying `subset` (indices; None: all) of its pending changes."""
        node = self.inodes[ino]
        e = dict(node.durable)
        for i, p in enumerate(node.pending):
            if subset is not None and i not in subset:
                continue
            if p[0] == "link":
                e[p[1]] = p[2]
            elif p[0] == "unlink":
                if e.get(p[1]) == p[2]:
                    del e[p[1]]
            else:  # rename: the inode is at its new name, whether or not its old one was durable
                if e.get(p[1]) == p[3]:
                    del e[p[1]]
                e[p[2]] = p[3]
        return e

    def unsynced(self, node):
        lo = min(node.pending) if node.pending else len(node.vol)
        return lo, len(node.vol)

    def content(self, ino, how):
        node = self.inodes[ino]
        if not node.pending or how == "kept":
            return bytes(node.vol)
        if how == "lost":
            return node.durable
        if how == "zeroed":  # the size reached the disk, the bytes did not
            n = len(node.vol)
            return node.durable[:n] + bytes(max(0, n - len(node.durable)))
        cut = how  # torn: the unsynced writes below `cut` only
        return bytes(node.vol[:cut]) + node.durable[cut:]

    def cuts(self, ino):
        lo, hi = self.unsynced(self.inodes[ino])
        c = {(lo + PAGE - 1) // PAGE * PAGE, (lo + hi) // 2 // PAGE * PAGE, (hi - 1) // PAGE * PAGE}
        c = sorted(x for x in c if lo < x < hi)
        if not c and hi - lo > 1:  # nothing 4 KiB-aligned inside: a torn line of a small file
            c = [(lo + hi) // 2]
        return c

    def state(self, names_of, data_of):
        """{path: bytes or None (a folder)} reachable from the root."""
        out = {}

        def walk(ino, prefix):
            for name, child in sorted(names_of(ino).items()):
                path = prefix + name
                if self.inodes[child].isdir:
                    out[path] = None
                    walk(child, path + "/")
                else:
                    out[path] = data_of(child)

        walk(0, "")
        return out

    def states(self):
        """[(description, state)] of this crash point."""
        dirs = [i for i, n in self.inodes.items() if n.isdir and n.pending]
        files = [i for i, n in self.inodes.items() if not n.isdir and n.pending]
        kept = lambda ino: self.names(ino)
        durable = lambda ino: self.names(ino, set())
        out = [("everything since the last fsyncs lost", self.state(durable, lambda i: self.content(i, "lost"))),
               ("everything kept", self.state(kept, lambda i: self.content(i, "kept")))]
        if files:
            out.append(("names kept, unsynced data lost", self.state(kept, lambda i: self.content(i, "lost"))))
            out.append(("names kept, unsynced data zeroed", self.state(kept, lambda i: self.content(i, "zeroed"))))
        where = self.paths()  # inode -> a name, for the descriptions
        for f in files:
            for cut in self.cuts(f):
                data = lambda i, f=f, cut=cut: self.content(i, cut if i == f else "kept")
                out.append((f"{where.get(f, 'an unnamed file')} torn at byte {cut}", self.state(kept, data)))
        for d in dirs:
            k = len(self.inodes[d].pending)
            if k <= 4:
                subsets = [{i for i in range(k) if m >> i & 1} for m in range(2 ** k - 1)]
            else:
                subsets = [set(range(j)) for j in range(k)] + [set(range(k)) - {j} for j in range(k)]
            for s in subsets:
                pend = self.inodes[d].pending
                lost = "; ".join(describe(pend[i]) for i in range(k) if i not in s)
                names_of = lambda ino, d=d, s=s: self.names(ino, s if ino == d else None)
                out.append((f"in {where.get(d, '.')}/ lost: {lost}",
                            self.state(names_of, lambda i: self.content(i, "kept"))))
        return out

    def paths(self):
        """inode -> its volatile path, for the descriptions."""
        out = {}

        def walk(ino, prefix):
            for name, child in self.inodes[ino].vol.items():
                out[child] = prefix + name
                if self.inodes[child].isdir:
                    walk(child, prefix + name + "/")

        walk(0, "")
        return out


def describe(p):
    if p[0] == "rename":
        return f"rename {p[1]} -> {p[2]}"
    return f"{'create' if p[0] == 'link' else 'unlink'} {p[1]}"


def state_key(state):
    h = hashlib.sha1()
    for path in sorted(state):
        h.update(path.encode() + b"\0")
        h.update(b"D" if state[path] is None else hashlib.sha1(state[path]).digest())
    return h.hexdigest()


def ranges(steps):
    """[1, 2, 3, 7, 8] -> "1-3, 7-8"."""
    out = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out)


def losses(path):
    """The (step, loss) of every line of a metrics.jsonl, as text; None when there is none."""
    try:
        with open(path, errors="replace") as f:
            return [tuple(m.groups()) for m in re.finditer(r'^\{"step":(\d+),"loss":([^,]+),', f.read(), re.M)]
    except FileNotFoundError:
        return None


def crash_points(ops):
    """Indices of the operations after which to crash: every one that changed the state, but of a
    run of writes to one file only the first, the middle and the last."""
    idx = []
    i = 0
    while i < len(ops):
        if ops[i][0] == "write":
            j = i
            key = (ops[i][1], ops[i][3][0])
            while j + 1 < len(ops) and ops[j + 1][0] == "write" and (ops[j + 1][1], ops[j + 1][3][0]) == key:
                j += 1
            idx.extend(sorted({i, (i + j) // 2, j}))
            i = j + 1
        else:
            idx.append(i)
            i += 1
    return set(idx)


# ---------------------------------------------------------------------------------------------
# the reruns


class Checker:
    def __init__(self, args, cmd, ref):
        self.args, self.cmd, self.ref = args, cmd, ref
        self.lock = threading.Lock()
        self.n = 0

    def materialise(self, state, where):
        os.makedirs(where)
        for path in sorted(state):
            p = os.path.join(where, path)
            if state[path] is None:
                os.makedirs(p, exist_ok=True)
            else:
                with open(p, "wb") as f:
                    f.write(state[path])

    def rerun(self, key, state):
        """The train command on a copy of the state: (status, the step it resumed from, whether its final
        checkpoint is the reference's, its error lines, its last line, whether it warned (of a damaged
        checkpoint), its metrics.jsonl's (step, loss))."""
        with self.lock:
            self.n += 1
            where = os.path.join(self.args.work, f"s{self.n}")
        self.materialise(state, where)
        cmd = [c.replace("@STATE@", where) for c in self.cmd]
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                               timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            shutil.rmtree(where, ignore_errors=True)
            return -9, 0, False, [], f"still running after {self.args.timeout} s: killed", False, None
        m = re.search(r"^resuming .* from step (\d+) ", p.stdout, re.M)
        resumed = int(m.group(1)) if m else 0
        final = os.path.join(where, self.args.final)
        same = os.path.exists(final) and open(final, "rb").read() == self.ref
        errors = [l for l in p.stderr.splitlines() if l.startswith("framechain: ") and
                  not l.startswith("framechain: warning: ")]
        lines = (p.stdout + p.stderr).strip().splitlines()
        warned = "framechain: warning: " in p.stderr  # a damaged checkpoint skipped or set aside
        metrics = losses(os.path.join(where, os.path.dirname(self.args.final), "metrics.jsonl"))
        shutil.rmtree(where, ignore_errors=True)
        return p.returncode, resumed, same, errors, lines[-1] if lines else "", warned, metrics

    def verdict(self, outcome, promised):
        """("pass" | "refused" | "fail", what happened)."""
        rc, resumed, same, errors, last = outcome[:5]
        if rc < 0:
            return "fail", f"killed by signal {-rc}: {last}"
        if rc == 0:
            if not same:
                return "fail", f"status 0 but the final checkpoint differs from the uninterrupted run's: {last}"
            if resumed < promised:
                return "fail", f"resumed from step {resumed}, but the checkpoint of step {promised} was promised durable"
            return "pass", f"resumed from step {resumed}"
        if promised:
            return "fail", f"status {rc} though the checkpoint of step {promised} was promised durable: {last}"
        if len(errors) != 1:
            return "fail", f"status {rc} with {len(errors)} error lines: {last}"
        return "refused", errors[0]


def check(args, cmd):
    ops = parse_log(args.log)
    model = Model(args.log + ".data")
    ref = open(args.ref, "rb").read()
    checker = Checker(args, cmd, ref)
    points = crash_points(ops)
    # With fault injection: the crash points from the skipped fsync to the next checkpoint promised
    # after it (the ones before it are those of the run without the fault).
    first = next((i for i, op in enumerate(ops) if op[0] == "skipfsync"), None) if args.from_fault else 0
    if first is None:
        raise SystemExit("powerloss.py: --from-fault, but the log has no skipped fsync")
    os.makedirs(args.work, exist_ok=True)
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    room = threading.Semaphore(2 * args.jobs)  # states waiting for a rerun hold their bytes: a few at a time
    futures = {}  # state key -> future
    results = []  # (crash point, description, promised, key)
    fault_step = None  # the checkpoint whose fsync was skipped

    def run(key, state):
        try:
            return checker.rerun(key, state)
        finally:
            room.release()

    for i, op in enumerate(ops):
        if args.from_fault and i == first:
            m = re.search(r"ckpt-(\d{8})\.safetensors\.tmp-", op[3][1])
            fault_step = int(m.group(1)) if m else model.renamed.get(op[2], 0)
            if op[3][1].endswith("/metrics.jsonl"):
                # metrics.jsonl's sync before a checkpoint: it matters until the checkpoint after that one
                later = (CKPT_RE.search(o[3][1]) for o in ops[i:] if o[0] == "rename")
                fault_step = next((int(m.group(2)) for m in later if m), 0)
        changed = model.apply(op)
        if args.from_fault and fault_step is not None and model.promised > fault_step:
            break  # the next checkpoint is promised: the skipped fsync no longer matters
        if i < first or not changed or i not in points:
            continue
        seen = set()
        for desc, state in model.states():
            key = state_key(state)
            if key in seen:
                continue
            seen.add(key)
            if key not in futures:
                room.acquire()
                futures[key] = pool.submit(run, key, state)
            where = f"after op {i} ({op[0]} {' '.join(op[3][1:2] if op[0] in ('write', 'fsync', 'skipfsync', 'open', 'trunc') else op[3][:2])})"
            results.append((where, desc, model.promised, key))
    pool.shutdown(wait=True)
    counts = {"pass": 0, "refused": 0, "fail": 0}
    fails = []
    ref_losses = losses(os.path.join(os.path.dirname(args.ref), "metrics.jsonl"))
    n_warned = n_gaps = 0
    for where, desc, promised, key in results:
        outcome = futures[key].result()
        v, what = checker.verdict(outcome, promised)
        # The trainer makes metrics.jsonl durable before each checkpoint: a run that resumed must end
        # with every step's line, those before its checkpoint kept through the power cut.
        if v == "pass" and outcome[6] != ref_losses:
            n_gaps += 1
            steps = [int(s) for s, _ in outcome[6] or []]
            v, what = "fail", f"{what}, but metrics.jsonl ends with the lines of steps {ranges(steps) or 'none'}"
        counts[v] += 1
        n_warned += v == "pass" and outcome[5]
        if v == "fail":
            fails.append(f"{where}, {desc}: {what}")
    total = len(results)
    summary = (f"{total} power-cut states ({len(futures)} distinct) at {len(set(r[0] for r in results))} crash "
               f"points: {counts['pass']} resumed correctly, {counts['refused']} refused with one error line, "
               f"{counts['fail']} failed; {n_warned} of the good reruns warned of a damaged checkpoint, {n_gaps} ended "
               f"with metrics.jsonl lines missing")
    if args.expect_failures:
        ok = counts["fail"] > 0 and total > 0
        print(f"{'PASS' if ok else 'FAIL'} {args.name}: {counts['fail']} of {total} states fail "
              f"without {args.fault_what}" + ("" if ok else " (the test cannot see the missing fsync)"))
        for f in fails[:3]:
            print("  e.g. " + f)
        return 0 if ok else 1
    for f in fails[:40]:
        print("  " + f)
    if len(fails) > 40:
        print(f"  ... and {len(fails) - 40} more")
    if args.failures:
        with open(args.failures, "w") as out:
            out.writelines(f + "\n" for f in fails)
    ok = counts["fail"] == 0 and total >= args.min_states
    print(f"{'PASS' if ok else 'FAIL'} {args.name}: {summary}" +
          ("" if total >= args.min_states else f" (fewer than {args.min_states} states)"))
    return 0 if ok else 1


def pick(log, step):
    """The fsyncs of the checkpoint of `step` in the log's first process as FC_POWERLOSS_SKIP_FSYNC's
    K:PATH (the K-th fsync of that path: the checkpoint writer's thread cannot shift another path's
    count): its file's, its folder's after the rename, and the one of metrics.jsonl made before the
    checkpoint's file was created."""
    ops = parse_log(log)
    pid = next(op[1] for op in ops if op[0] != "start")
    name = f"ckpt-{step:08d}.safetensors"
    file_n = dir_n = metrics_n = None
    renamed = False
    count = {}  # path -> its fsyncs so far
    for kind, p, tid, f in ops:
        if p != pid:
            continue
        if kind == "fsync":
            count[f[1]] = count.get(f[1], 0) + 1
        if kind == "fsync" and f[1].endswith("/metrics.jsonl") and not file_n:
            metrics_n = f"{count[f[1]]}:{f[1]}"
        if kind == "fsync" and name + ".tmp-" in f[1]:
            file_n = f"{count[f[1]]}:{f[1].split('.tmp-')[0]}.tmp-*"
        if kind == "rename" and f[1].endswith("/" + name):
            renamed = True
        elif kind == "fsync" and renamed:
            dir_n = f"{count[f[1]]}:{f[1]}"
            break
    if not file_n or not dir_n or not metrics_n:
        raise SystemExit(f"powerloss.py: no fsyncs of {name} (or of metrics.jsonl before it) in {log}")
    print(file_n, dir_n, metrics_n)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "pick":
        return pick(sys.argv[2], int(sys.argv[3]))
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check"])
    ap.add_argument("--log", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--ref", required=True, help="the uninterrupted run's final checkpoint")
    ap.add_argument("--final", required=True, help="the final checkpoint's path under a state's root")
    ap.add_argument("--name", default="powerloss")
    ap.add_argument("--min-states", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120, help="seconds a rerun may take")
    ap.add_argument("--from-fault", action="store_true")
    ap.add_argument("--failures", help="every failing state, one a line, to this file")
    ap.add_argument("--expect-failures", action="store_true", help="a fault was injected: failing states must be found")
    ap.add_argument("--fault-what", default="the skipped fsync")
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("no train command after --")
    cut = argv.index("--")
    return check(ap.parse_args(argv[:cut]), argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
