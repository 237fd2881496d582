"""Cost must follow the change, not the repository: ``mevedel prompt`` on a
workspace of ``MEVEDEL_BENCH_DIRS`` x ``MEVEDEL_BENCH_PER_DIR`` (400 x 250 =
100,000) small files against the same prompt on a 3-file workspace, and the
record's disk use, each against a baseline measured in the same run.

Each prompt is a scripted agent's turn (``tests/agents/scripted_agent.py``):
one ``fs/write_text_file`` and one shell command (which appends to an
existing file), in a session continued from prompt to prompt, each prompt a
new process (as a person runs ``mevedel prompt``). Byte code is compiled
first (``PYTHONPYCACHEPREFIX``, one untimed prompt on the small workspace).
``MEVEDEL_BENCH_SOURCE=DIR`` runs the commands from another checkout's
source (``DIR/server`` and ``DIR/protocol`` first on ``PYTHONPATH``; saved
as ``scale_source``, or ``MEVEDEL_BENCH_NAME``): the code before a change,
measured the same way.

Reported:

- ``git add -A && git commit`` of the large workspace into a shadow
  repository (``GIT_DIR`` outside it), the first (every file hashed) and
  one after a one-file change; a stat walk of the tree (``os.walk`` +
  ``lstat``): the anchors;
- the first prompt on the large workspace (nothing recorded yet: every file
  read, as a server's first turn reads them) against the first git commit:
  goal at most 1x (met by the wall; ``x_baseline_cpu`` the same by CPU);
- later prompts, large vs small, interleaved round by round (medians):
  goal at most +0.5 s;
- each with its CPU time (user + system, the process and its children:
  the agent too), steadier than the wall on a loaded machine;
- ``.mevedel/file-state/`` on disk (allocated blocks) against the
  workspace's content plus 100 bytes a file: goal at most 2x.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import checkout_path, compiling_env, report

HERE = Path(__file__).resolve().parent
AGENT = HERE.parent / "tests" / "agents" / "scripted_agent.py"
MEVEDEL = str(Path(sys.executable).parent / "mevedel")
DIRS = int(os.environ.get("MEVEDEL_BENCH_DIRS", "400"))
PER_DIR = int(os.environ.get("MEVEDEL_BENCH_PER_DIR", "250"))
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "5"))


def build_large(root: Path) -> int:
    """The large workspace; returns its content bytes."""
    total = 0
    for d in range(DIRS):
        directory = root / f"pkg{d:03d}"
        directory.mkdir(parents=True)
        for f in range(PER_DIR):
            data = b"X = %d\n" % (d * PER_DIR + f)
            (directory / f"mod{f:03d}.py").write_bytes(data)
            total += len(data)
    return total


def build_small(root: Path) -> int:
    root.mkdir(parents=True)
    total = 0
    for name in ("pkg000/mod000.py", "pkg001/mod000.py", "README"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"X = 1\n")
        total += 6
    return total


#: CPU seconds (user + system) of each command timed, by its wall time:
#: on a loaded machine the walls swing, the CPU much less.
CPU: dict[float, float] = {}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict, cwd: Path, shell: bool = False) -> float:
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, shell=shell)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    CPU[elapsed] = _children_cpu() - cpu
    return elapsed


def stat_walk(root: Path) -> float:
    started = time.perf_counter()
    for directory, names, files in os.walk(root):
        names[:] = [n for n in names if n not in (".git", ".mevedel")]
        for name in files:
            os.lstat(os.path.join(directory, name))
    return time.perf_counter() - started


def disk_bytes(directory: Path) -> tuple[int, int]:
    """(allocated bytes, files) under ``directory``, each inode once."""
    seen: set[int] = set()
    blocks = files = 0
    for path in [directory, *directory.rglob("*")]:
        st = path.lstat()
        if st.st_ino in seen:
            continue
        seen.add(st.st_ino)
        blocks += st.st_blocks * 512
        files += path.is_file()
    return blocks, files


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-scale-", ignore_cleanup_errors=True) as scratch_name:
        scratch = Path(scratch_name)
        large, small, state, config = scratch / "large", scratch / "small", scratch / "state", scratch / "config"
        (config / "mevedel").mkdir(parents=True)
        state.mkdir()
        files = DIRS * PER_DIR
        content = build_large(large)
        build_small(small)
        script = scratch / "script.json"
        turn = [
            {"write": {"path": "pkg000/written.py", "content": "Y = 2\n"}},
            {"terminal": {"command": "sh", "args": ["-c", "echo 'Z = 3' >> pkg001/mod000.py"]}},
            {"say": "END"},
        ]
        script.write_text(json.dumps({"turns": [turn]}))
        agent = [sys.executable, str(AGENT), str(script)]
        (config / "mevedel" / "config.json").write_text(json.dumps({"agents": {"scripted": {"command": agent}}, "defaultAgent": "scripted"}))
        env = compiling_env(scratch, XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(config))
        source = os.environ.get("MEVEDEL_BENCH_SOURCE")
        if source:
            env["PYTHONPATH"] = checkout_path(source)
        git_env = {**env, "GIT_DIR": str(scratch / "shadow.git"), "GIT_WORK_TREE": str(large),
                   "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
        prompt = [MEVEDEL, "prompt", "go"]

        timed(prompt, env, small)  # byte code compiled, the small session started
        stat_walk(large)  # the page cache warm for both sides
        walk_s = statistics.median(stat_walk(large) for _ in range(3))
        subprocess.run(["git", "init", "-q"], env=git_env, check=True)
        git_first = timed("git add -A && git -c gc.auto=0 commit -qm first", git_env, large, shell=True)
        first_prompt = timed(prompt, env, large)
        (large / "pkg002" / "mod000.py").write_bytes(b"X = -1\n")
        git_later = timed("git add -A && git -c gc.auto=0 commit -qm later", git_env, large, shell=True)

        later: dict[str, list[float]] = {"small": [], "large": []}
        for _ in range(ROUNDS):
            later["small"].append(timed(prompt, env, small))
            later["large"].append(timed(prompt, env, large))
        small_s, large_s = statistics.median(later["small"]), statistics.median(later["large"])
        small_cpu = statistics.median(CPU[s] for s in later["small"])
        large_cpu = statistics.median(CPU[s] for s in later["large"])
        state_bytes, state_files = disk_bytes(large / ".mevedel" / "file-state")
        allowed = 2 * content + 100 * files

        rows = [
            {"case": f"stat walk of {files} files (anchor)", "s": round(walk_s, 3)},
            {"case": "shadow git add -A && commit, first (baseline)", "s": round(git_first, 3), "cpu_s": round(CPU[git_first], 3)},
            {"case": "shadow git add -A && commit, one file changed (anchor)", "s": round(git_later, 3), "cpu_s": round(CPU[git_later], 3)},
            {"case": "first mevedel prompt on the large workspace", "s": round(first_prompt, 3), "cpu_s": round(CPU[first_prompt], 3),
             "x_baseline": round(first_prompt / git_first, 2), "x_baseline_cpu": round(CPU[first_prompt] / CPU[git_first], 2),
             "goal": "<= 1x the first git commit", "met": first_prompt <= git_first},
            {"case": "mevedel prompt, 3 files (baseline)", "s": round(small_s, 3), "cpu_s": round(small_cpu, 3)},
            {"case": f"mevedel prompt, {files} files", "s": round(large_s, 3), "cpu_s": round(large_cpu, 3), "added_s": round(large_s - small_s, 3),
             "added_cpu_s": round(large_cpu - small_cpu, 3), "goal": "<= +0.5 s", "met": large_s - small_s <= 0.5},
            {"case": ".mevedel/file-state on disk (MB)", "s": "", "mb": round(state_bytes / 1e6, 2), "files": state_files,
             "x_baseline": round(state_bytes / allowed, 3), "goal": "<= 2x content + 100 B a file", "met": state_bytes <= allowed},
        ]
        notes = {"content_bytes": content, "files": files, "allowed_bytes": allowed, "rounds": ROUNDS,
                 "small_samples_s": [round(s, 3) for s in later["small"]], "large_samples_s": [round(s, 3) for s in later["large"]],
                 "load": os.getloadavg()[0]}
        report(os.environ.get("MEVEDEL_BENCH_NAME") or ("scale_source" if source else "scale"), rows, notes)


if __name__ == "__main__":
    main()
