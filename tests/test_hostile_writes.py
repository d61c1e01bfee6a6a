"""Files that cannot be turned against the user (issue 26): planted links, special files, the input as the
output, names with terminal escape sequences.

Every case plants what an attacker (or a careless user) would and checks that nothing outside
what attnsvm writes changes, or that the command refuses with one clear line before any work.
"""

import os
import socket
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from attnsvm import _files, runner
from attnsvm._files import atomic_write, folder_digest, open_lock, printable
from attnsvm.cli import UserError, cli
from attnsvm.generators import random_problem
from attnsvm.problem import TokenProblem
from attnsvm.runner import StorageError, run_experiment

sys.path.insert(0, os.path.dirname(__file__))
from test_hostile_storage import StoreToy  # noqa: E402


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


def _cli(*args):
    return CliRunner().invoke(cli, list(args))


# ------------------------------------------------------ temporary files
def test_atomic_write_never_follows_a_link_planted_at_a_temporary_name(tmp_path, victim, monkeypatch):
    """Before: the writer opened `OUT.tmp-<pid>` with open(..., "wb"), following a planted link to the victim."""
    out = tmp_path / "out.npz"
    names = iter(["a" * 32, "b" * 32])
    monkeypatch.setattr(_files.secrets, "token_hex", lambda n: next(names))
    first, second = (f"{out}.tmp-attnsvm-{os.getpid()}-{c * 32}" for c in "ab")
    for planted in (f"{out}.tmp-{os.getpid()}", first):  # the oldest name and the first draw
        os.symlink(victim, planted)
    atomic_write(str(out), lambda fh: fh.write(b"new"))
    assert victim.read_text() == "precious\n" and out.read_bytes() == b"new"
    assert os.path.islink(first)  # left as it was: never removed or written through
    assert not os.path.exists(second)


def test_atomic_write_replaces_a_link_at_the_target_instead_of_writing_through_it(tmp_path, victim):
    out = tmp_path / "out.txt"
    os.symlink(victim, out)
    atomic_write(str(out), lambda fh: fh.write(b"new"))
    assert victim.read_text() == "precious\n" and not os.path.islink(out) and out.read_bytes() == b"new"


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_atomic_write_refuses_a_target_that_is_not_a_regular_file(tmp_path, kind):
    """Before: `solve good.npz -o /dev/full` as root renamed a regular file over the device node (exit 0)."""
    target = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write(str(target), lambda fh: fh.write(b"new"))
    assert not target.is_file() and [p.name for p in tmp_path.iterdir()] == ["special"]  # no temporary file left


def test_figures_are_not_written_through_a_planted_link(tmp_path, victim):
    from attnsvm.plotting import save_figure, subplots

    os.symlink(victim, tmp_path / "fig.png")
    fig, ax = subplots()
    ax[0, 0].plot([0, 1])
    paths = save_figure(fig, str(tmp_path), "fig")
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(paths[0]) and open(paths[0], "rb").read(4) == b"\x89PNG"


def test_probe_outputs_are_not_written_through_a_planted_link(tmp_path, victim):
    from attnsvm.cli.probe import _write_text

    os.symlink(victim, tmp_path / "probe.json")
    _write_text(str(tmp_path / "probe.json"), "{}")
    assert victim.read_text() == "precious\n" and (tmp_path / "probe.json").read_text() == "{}"
    os.mkfifo(tmp_path / "probe.csv")
    with pytest.raises(StorageError, match=r"cannot write .*probe\.csv: it is a fifo"):
        _write_text(str(tmp_path / "probe.csv"), "a,b\n")


# ------------------------------------------------------------ lock files
@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_lock_file_planted_as_a_link_is_refused_and_the_victim_kept(tmp_path, victim, how):
    """Before: `OUT/NAME/.lock` was opened with open(..., "a+") and truncated: a link to the victim received the pid."""
    toy = StoreToy()
    expdir = tmp_path / "out" / "store-toy"
    expdir.mkdir(parents=True)
    (os.symlink if how == "symlink" else os.link)(victim, expdir / ".lock")
    with pytest.raises(StorageError, match=r"cannot use the lock file .*\.lock: "):
        run_experiment(toy, toy.Config(), str(tmp_path / "out"), progress=False)
    assert victim.read_text() == "precious\n"
    assert not (expdir / "results.parquet").exists()


def test_open_lock_refuses_special_files_and_keeps_a_regular_lock(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="the lock file is a fifo"):
        open_lock(str(tmp_path / "fifo"))
    with open_lock(str(tmp_path / "lock")) as fh:
        fh.write(b"123")
    with open_lock(str(tmp_path / "lock")) as fh:
        assert fh.read() == b"123"


def test_a_run_with_a_regular_lock_file_left_behind_works(tmp_path):
    toy = StoreToy()
    first = run_experiment(toy, toy.Config(), str(tmp_path), progress=False)
    assert open(os.path.join(first.outdir, ".lock")).read() == str(os.getpid())
    assert run_experiment(toy, toy.Config(), str(tmp_path), progress=False).resumed == 3


# ------------------------------------------------------ CLI output paths
@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "p.npz"
    random_problem(4, 5, 6, 0).save(str(path))
    return path


def test_solve_refuses_to_write_over_its_input(tmp_path, problem_file):
    """Before: `attnsvm solve same.npz -o same.npz` silently replaced the problem with the solution."""
    before = problem_file.read_bytes()
    os.symlink(problem_file, tmp_path / "alias.npz")
    np.save(tmp_path / "sel.npy", np.zeros(4, np.int64))
    sel = str(tmp_path / "sel.npy")
    for out, args in ((problem_file, []), (tmp_path / "alias.npz", []), (sel, ["--select", sel])):
        r = _cli("solve", str(problem_file), *args, "-o", str(out))
        assert r.exit_code == 2, r.output
        assert r.output.startswith("attnsvm: error: --output: ") and "is the input file" in r.output
        assert r.output.count("\n") == 1
    assert problem_file.read_bytes() == before
    r = _cli("solve", str(problem_file), "-o", str(tmp_path / "sol.npz"))
    assert r.exit_code == 0 and (tmp_path / "sol.npz").is_file()


@pytest.mark.parametrize("kind", ["fifo", "socket", "link-to-fifo", "missing-folder", "through-a-file"])
@pytest.mark.parametrize("command", ["solve", "generate"])
def test_output_that_cannot_be_a_regular_file_is_refused_before_any_work(tmp_path, problem_file, kind, command,
                                                                         monkeypatch):
    special = tmp_path / "special"
    if kind in ("fifo", "link-to-fifo"):
        os.mkfifo(special)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(special))
    out = {"link-to-fifo": tmp_path / "link", "missing-folder": tmp_path / "nowhere" / "x.npz",
           "through-a-file": problem_file / "x.npz"}.get(kind, special)
    if kind == "link-to-fifo":
        os.symlink(special, out)
    work = []
    monkeypatch.setattr(TokenProblem, "load", classmethod(lambda cls, *a, **k: work.append("load")))
    args = ["solve", str(problem_file)] if command == "solve" else ["generate", "rd", "--n", "3", "--T", "4", "--d", "5"]
    r = _cli(*args, "-o", str(out))
    assert r.exit_code == 2, r.output
    assert r.output.startswith("attnsvm: error: --output: ") and r.output.count("\n") == 1
    expect = {"fifo": "is a fifo", "socket": "is a socket", "link-to-fifo": "is a fifo",
              "missing-folder": "does not exist", "through-a-file": "is a file, not a folder"}[kind]
    assert expect in r.output
    assert work == []  # refused before the problem was even read
    if kind in ("fifo", "link-to-fifo"):
        assert not special.is_file() and os.path.exists(special)


def test_api_save_refuses_a_special_file(tmp_path):
    from attnsvm.errors import ProblemFileError

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ProblemFileError, match="it is a fifo"):
        random_problem(3, 4, 5, 0).save(str(tmp_path / "fifo"))


# ------------------------------------------------------------ escaping
HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\r\u202eX\nnext"


def test_info_escapes_control_characters_of_a_stored_name(tmp_path):
    """Before: a problem file's stored name with terminal escape sequences was printed raw (title injection)."""
    problem = random_problem(3, 4, 5, 0)
    problem.name = HOSTILE
    problem.save(str(tmp_path / "p.npz"))
    r = _cli("info", str(tmp_path / "p.npz"))
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert "\x1b" not in r.output and "\x07" not in r.output and "\r" not in r.output and "\u202e" not in r.output
    assert first.endswith("(evil\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u202eX\\x0anext)")
    r = _cli("info", "--json", str(tmp_path / "p.npz"))
    assert "\x1b" not in r.output and "\\u001b]0;pwned" in r.output


def test_error_messages_escape_control_characters(capsys):
    UserError(f"bad name {HOSTILE}").show()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\u202e" not in err
    # one line: a newline in the message is escaped too (a path with a newline no longer splits the error)
    assert err == "attnsvm: error: bad name evil\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u202eX\\x0anext\n"


def test_printable_keeps_ordinary_text():
    assert printable("héllo wörld ✓ 日本") == "héllo wörld ✓ 日本"
    assert printable("a\tb") == "a\\x09b" and printable("a\tb", keep="\t") == "a\tb"
    assert printable("\U000e0001") == "\\U000e0001"


def test_folder_digest_reads_files_not_folders_and_follows_links(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"1234")
    first = folder_digest(str(tmp_path / "m"))
    (tmp_path / "m" / "sub").mkdir()
    (tmp_path / "m" / "sub" / "x").write_bytes(b"x")
    assert folder_digest(str(tmp_path / "m")) == first
    (tmp_path / "blob").write_bytes(b"1234")
    os.unlink(tmp_path / "m" / "w.bin")
    os.symlink(tmp_path / "blob", tmp_path / "m" / "w.bin")  # the layout of a Hugging Face cache snapshot
    assert folder_digest(str(tmp_path / "m")) == first
    (tmp_path / "blob").write_bytes(b"1235")
    assert folder_digest(str(tmp_path / "m")) != first


def test_stale_temporary_files_with_random_names_are_removed(tmp_path):
    toy = StoreToy()
    cfg = toy.Config()
    summary = run_experiment(toy, cfg, str(tmp_path), progress=False)
    sharddir = os.path.join(summary.outdir, "shards", runner.config_hash(cfg))
    stale = os.path.join(sharddir, "seeds-000.parquet.tmp-attnsvm-4242-" + "0a1b2c3d" * 4)
    open(stale, "wb").write(b"half")
    run_experiment(toy, cfg, str(tmp_path), progress=False)
    assert not os.path.exists(stale)


def test_a_figure_path_taken_by_a_fifo_is_one_clear_error(tmp_path):
    from attnsvm.plotting import save_figure, subplots

    class PlotToy(StoreToy):
        name = "plot-toy"

        def plot(self, config, table, outdir):
            fig, ax = subplots()
            ax[0, 0].plot(table["seed"], table["value"])
            return save_figure(fig, outdir, "fig")

    toy = PlotToy()
    os.makedirs(tmp_path / "plot-toy")
    os.mkfifo(tmp_path / "plot-toy" / "fig.png")
    with pytest.raises(StorageError, match=r"cannot write the figures of plot-toy: .*fig\.png: it is a fifo") as info:
        run_experiment(toy, toy.Config(), str(tmp_path), progress=False)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "plot-toy" / "fig.png").is_file()
