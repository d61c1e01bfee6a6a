"""Command-line interface: ``attnsvm COMMAND ...`` (see ``attnsvm --help``).

User errors (bad arguments, unreadable files, invalid problems) print one line
``attnsvm: error: ...`` to stderr and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import json
import sys

import click
import numpy as np

from attnsvm import __version__
from attnsvm._files import printable
from attnsvm.errors import AttnSVMError, ValidationError


class UserError(click.ClickException):
    """A user error shown as one line on stderr (exit status 2)."""

    exit_code = 2

    def show(self, file=None):
        # messages may quote names read from files or paths given: escape control characters (no terminal escape
        # sequences) and newlines (one line)
        click.echo(f"attnsvm: error: {printable(self.format_message())}", err=True)


def _usage_line(exc: click.UsageError) -> str:
    """One line for a click usage error: the message (with click's suggestion) and where to read the usage."""
    msg = " ".join(exc.format_message().split())
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "attnsvm"
    if ctx is not None and isinstance(ctx.command, click.Group) and msg.startswith("No such command"):
        import difflib

        name = msg.split("'")[1] if msg.count("'") >= 2 else ""
        near = difflib.get_close_matches(name, list(ctx.command.commands), n=1)
        if near and "Did you mean" not in msg:
            msg += f" Did you mean {near[0]!r}?"
    return f"{msg} (see '{where} --help')"


class _Group(click.Group):
    """Turn attnsvm's own errors into one-line messages instead of tracebacks.

    Click's usage errors (unknown command or option, missing or bad argument) print one line
    ``attnsvm: error: ...`` with click's suggestion instead of click's three-line block, exit 2.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # 'attnsvm' alone: click's help, as before
                exc.show()
            else:
                click.echo(f"attnsvm: error: {_usage_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("attnsvm: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AttnSVMError as exc:
            raise UserError(str(exc)) from None
        except KeyboardInterrupt as exc:
            # Ctrl-C: say what is kept and how to resume (a sweep's RunInterrupted says it), exit 130
            click.echo(f"attnsvm: {getattr(exc, 'message', None) or 'interrupted'}", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="attnsvm")
def cli():
    """attnsvm: attention as a max-margin token selector.

    Describe token-selection problems, solve the SVMs of the theory, train attention
    models and reproduce the papers' experiments.
    """


# ----------------------------------------------------------------- generate
@cli.command()
@click.argument("name")
@click.option("--n", "n", type=int, default=None, help="Samples (random generators).")
@click.option("--T", "T", type=int, default=None, help="Tokens per sample (random generators).")
@click.option("--d", "d", type=int, default=None, help="Token dimension (random generators).")
@click.option("--seed", type=int, default=None, help="Random seed (random generators, default 0).")
@click.option("--mode", type=click.Choice(["cross", "self"]), default=None, help="rd: cross- or self-attention (default cross).")
@click.option("--rng", type=click.Choice(["numpy", "torch"]), default=None,
              help="rd: random stream; torch replays the research code (default numpy).")
@click.option("--C", "C", type=float, default=None, help="mm-loss: score of the first input's optimal token (default 1).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Output .npz file.")
@click.option("--max-memory", default=None,
              help="Memory limit of a random instance, e.g. 4G (default: $ATTNSVM_MAX_MEMORY, else 80% of available).")
def generate(name, n, T, d, seed, mode, rng, C, output, max_memory):
    """Generate the problem instance NAME and save it as .npz.

    \b
    Random (need --n --T --d; --seed defaults to 0):
      rd                 unit-norm Gaussian tokens, queries, head; +-1 labels
      orthonormal        orthonormal tokens per sample (lambda-head data)
    Fixed instances of the papers:
      tf-vis1, tf-vis2   the 2-D pictures of Transformers as SVMs
      mm-single-global, mm-single-local, mm-multi,
      mm-joint-tight, mm-joint-relaxed, mm-loss [--C]
                         the max-margin token selection examples

    Example: attnsvm generate rd --n 6 --T 8 --d 10 --seed 0 -o problem.npz
    """
    from attnsvm.generators import GENERATORS
    from attnsvm.npzfile import output_file

    output = output_file(output, "--output", "problem file")  # before any work: a device, a folder, a fifo
    if name not in GENERATORS:
        raise UserError(f"unknown generator {name!r}; choose one of: {', '.join(GENERATORS)}")
    func, sized, _ = GENERATORS[name]
    if sized:
        missing = [flag for flag, val in (("--n", n), ("--T", T), ("--d", d)) if val is None]
        if missing:
            raise UserError(f"generator {name!r} needs {' '.join(missing)}")
        kwargs = {"seed": 0 if seed is None else seed, "max_memory": _max_memory(max_memory)}
        if name == "rd":
            kwargs.update(mode=mode or "cross", rng=rng or "numpy")
        elif mode is not None or rng is not None:
            raise UserError(f"--mode and --rng apply to 'rd' only, not {name!r}")
        if C is not None:
            raise UserError(f"--C applies to 'mm-loss' only, not {name!r}")
        problem = func(n, T, d, **kwargs)
    else:
        flags = (("--n", n), ("--T", T), ("--d", d), ("--seed", seed), ("--mode", mode), ("--rng", rng))
        given = [flag for flag, val in flags if val is not None]
        if given:
            raise UserError(f"{name!r} is a fixed instance; {', '.join(given)} do(es) not apply")
        if C is not None and name != "mm-loss":
            raise UserError(f"--C applies to 'mm-loss' only, not {name!r}")
        problem = func(C) if (name == "mm-loss" and C is not None) else func()
    problem.save(output)
    click.echo(f"wrote {printable(output)}: {problem!r}")


# --------------------------------------------------------------------- info
def describe_problem(problem, tol: float = 1e-9) -> dict:
    """Summary of a problem as a JSON-friendly dict (used by ``attnsvm info``)."""
    info = {
        "name": problem.name,
        "n": problem.n,
        "T": problem.T,
        "d": problem.d,
        "mode": problem.mode,
        "query_index": problem.query_index,
        "labels": problem.Y is not None,
        "head": problem.v is not None,
        "fixed_W": problem.W is not None,
        "overparameterized": problem.overparameterized,
    }
    if problem.Y is not None and problem.v is not None:
        opt = problem.optimal_tokens(tol=tol)
        info.update(
            optimal_tokens=opt.index.tolist(),
            ties=[np.flatnonzero(row).tolist() if tie else [] for row, tie in zip(opt.tied, opt.has_tie)],
            score_gaps=[float(g) for g in opt.gap],
        )
    return info


@cli.command()
@click.argument("problem_file", type=click.Path(dir_okay=False))
@click.option("--tol", type=float, default=1e-9, show_default=True, help="Relative tolerance for score ties.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def info(problem_file, tol, as_json):
    """Describe a problem file (shapes, attention mode, optimal tokens, ties, score gaps) or a solution file
    written by 'attnsvm solve -o' (status, norm, margin, certificate)."""
    from attnsvm.cli.solve import (
        archive_format, format_solution_summary, not_an_archive, solution_file_summary)
    from attnsvm.problem import TokenProblem
    from attnsvm.svm import SVMSolution

    wrong = not_an_archive(problem_file)
    if wrong is not None:
        raise UserError(wrong)
    if archive_format(problem_file) == SVMSolution.FORMAT:
        summary = solution_file_summary(problem_file)
        click.echo(json.dumps(summary, indent=2) if as_json else format_solution_summary(summary))
        return
    problem = TokenProblem.load(problem_file)
    summary = describe_problem(problem, tol=tol)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    n, T, d = problem.shape
    # the stored name comes from the file: control characters escaped (no terminal escape sequences)
    lines = [f"problem   {printable(problem_file)}" + (f" ({printable(problem.name)})" if problem.name else "")]
    lines.append(f"shape     n={n} samples, T={T} tokens, d={d} dimensions")
    mode = {"cross": "cross-attention (queries Z)", "self": f"self-attention (query = token {problem.query_index})",
            "prompt": "prompt attention (trainable p" + (", fixed W)" if problem.W is not None else ", W = I)")}[problem.mode]
    lines.append(f"mode      {mode}")
    lines.append(f"labels    {'yes' if problem.Y is not None else 'no'}; head v: {'yes' if problem.v is not None else 'no'}")
    over = "yes (every selection is separable for generic data)" if problem.overparameterized else "no"
    lines.append(f"d >= max(T-1, n) = {max(T - 1, n)}: {over}")
    if "optimal_tokens" in summary:
        lines.append("sample  optimal  gap        ties")
        for i, (a, gap, ties) in enumerate(zip(summary["optimal_tokens"], summary["score_gaps"], summary["ties"])):
            lines.append(f"{i:>6}  {a:>7}  {gap:<9.3g}  {','.join(map(str, ties)) if ties else '-'}")
        n_ties = sum(1 for t in summary["ties"] if t)
        lines.append(f"ties      {n_ties} sample(s) with a tied optimal token" if n_ties
                     else "ties      none (every optimal token is unique)")
    else:
        lines.append("optimal tokens: need labels Y and a head v")
    click.echo("\n".join(lines))


# -------------------------------------------------------------------- solve
@cli.command()
@click.argument("problem_file", type=click.Path(dir_okay=False))
@click.option("--select", default="opt", show_default=True,
              help="'opt' (optimal tokens) or a file: int (n,) selection -> Att-SVM, bool (n, T) sets -> Gen-SVM "
                   "(.npy, .npz with key 'select'/'selected', or whitespace/comma separated text).")
@click.option("--norm", type=click.Choice(["fro", "nuclear"]), default="fro", show_default=True,
              help="Frobenius (W-parameterization) or nuclear ((K,Q)-parameterization) norm.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the solution to this .npz file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of a table.")
def solve(problem_file, select, norm, output, as_json):
    """Solve the max-margin SVM of a problem file, with its certificate.

    An infeasible selection is a result (status 'infeasible' with the multipliers that
    prove it), not an error.
    """
    from attnsvm.cli.solve import run_solve

    click.echo(run_solve(problem_file, select=select, norm=norm, output=output, as_json=as_json))


# -------------------------------------------------------------------- probe
def _int_list(text, name):
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise UserError(f"{name} expects comma-separated integers, got {text!r}") from None


def _curve_removed(ctx, param, value):
    """``--curve`` (deprecated) was removed in 0.3: one line naming its replacement, exit 2."""
    if value is not None:
        raise UserError("--curve was removed in 0.3: use --svm-sentences with several values, e.g. --svm-sentences "
                        "48,128,512 (each head's score, null heads, p and verdict at each m, and a stable verdict)")


class _NullKinds(click.Choice):
    """``--null-kind``'s choices: the verdict kinds of the null registry (:func:`attnsvm.real.nulls.verdict_null_kinds`),
    read when click asks for them, so ``attnsvm --help`` does not import the solvers."""

    def __init__(self):
        super().__init__(())

    @property
    def choices(self):
        from attnsvm.real.nulls import verdict_null_kinds

        return verdict_null_kinds()

    @choices.setter
    def choices(self, value):  # click's constructor sets them: the registry is the source
        pass

class _Setting(click.Option):
    """An ``attnsvm probe`` option of a :class:`~attnsvm.real.probe_config.ProbeConfig` field (``setting``; default:
    the option's name): unset, its value is None and left out, so ProbeConfig's default applies and ProbeConfig alone
    validates it. ``--help`` shows that default, read from the field when the help is written (ProbeConfig imports
    the solvers: never at ``attnsvm``'s start)."""

    def __init__(self, *args, setting: str | None = None, **kwargs):
        super().__init__(*args, default=None, **kwargs)
        self.setting = setting or self.name

    def get_help_record(self, ctx):
        from attnsvm.real.probe_config import ProbeConfig

        default = ProbeConfig.model_fields[self.setting].default
        if default is None:
            return super().get_help_record(ctx)
        before = self.default, self.show_default
        self.default, self.show_default = default, True  # click formats it as its own default, for this record only
        try:
            return super().get_help_record(ctx)
        finally:
            self.default, self.show_default = before


@cli.command()
@click.option("--layers", cls=_Setting, help="Comma-separated layer indices (default: all; MiniLM has 6).")
@click.option("--heads", cls=_Setting, help="Comma-separated head indices (default: all; MiniLM has 12).")
@click.option("--sentences", "sentences_file", type=click.Path(dir_okay=False), default=None,
              help="UTF-8 file, one sentence per line, blank lines only at the end (default: English sentences "
                   "shipped with Python's docs).")
@click.option("--n-sentences", cls=_Setting, type=int,
              help="Sentences to read selections from, an integer >= 1 (corpus sentences; not with --sentences).")
@click.option("--svm-sentences", cls=_Setting,
              help="Sentences per head in the nuclear Gen-SVM; a comma list (e.g. 48,128,256) probes every head at "
                   "each (one row per head and m, BY over the heads at each m, column stable_verdict: the verdict "
                   "where the two largest m agree, else 'depends on sample size'; stored: a task per head and m).")
@click.option("--threshold", cls=_Setting, type=float, help="Attention above this marks a selected token.")
@click.option("--query", cls=_Setting, type=click.Choice(["word", "cls", "all"]),
              help="Query token per sentence: a random word token, [CLS] (encoders only; decoders use word), or all: "
                   "every word token is a query (one sequence Gen-SVM per head over all of them; slower; no null "
                   "heads (spectrum or transplanted) and no verdict yet: they will be reported later).")
@click.option("--seed", cls=_Setting, type=int)
@click.option("--query-seed", cls=_Setting, type=int,
              help="Another draw of the queries on the same sentences (default: --seed): run twice to see a head's "
                   "spread over query draws.")
@click.option("--max-length", cls=_Setting, type=int,
              help="Tokens per sentence; longer sentences are truncated (with a warning). Default: the smaller of 128 "
                   "and the model's position limit (printed).")
@click.option("--out", default=None, help="Folder for probe.csv, probe.json, the heat map and the page probe.html; each "
                                         "head is stored in OUT/probe as it finishes, so the same command resumes a "
                                         "killed probe ('attnsvm report OUT' shows it). Default: "
                                         "./attnsvm-probe/<hash of the settings>, named in the first line (the same "
                                         "settings resume that folder, others get a new one).")
@click.option("--no-store", is_flag=True,
              help="Run in this process and write nothing (no folder, no resume); not with --out.")
@click.option("--view-sentences", cls=_Setting, type=int,
              help="Sentences per head shown in probe.html, tokens shaded by the head's attention.")
@click.option("--curve", default=None, hidden=True, expose_value=False, callback=_curve_removed)  # removed in 0.3
@click.option("--null-draws", cls=_Setting, type=int,
              help="Null heads per head (of --null-kind; with a kind other than spectrum as many spectrum nulls too) "
                   "behind each head's verdict (0: no verdict). Not for --query all.")
@click.option("--null-kind", cls=_Setting, type=_NullKinds(),
              help="The verdict's null heads, a kind of the registry attnsvm.real.nulls.NULLS "
                   "(attnsvm.real.nulls.verdict_null_kinds()). spectrum: the head's singular values, Haar-random "
                   "singular vectors; "
                   "sink: the head's own W with its query side rotated at random about the mean query (keeps its "
                   "query-independent key preference, e.g. an attention sink on [CLS], which every trained head shares and "
                   "spectrum nulls do not). With a kind other than spectrum the spectrum nulls are drawn too and "
                   "reported in spectrum_* columns.")
@click.option("--statistic", cls=_Setting, type=click.Choice(["corr_restricted", "margin_ratio"]),
              help="What the verdict compares each head with its null heads by. "
                   "margin_ratio: the head's own margin on its selections over the SVM's, both per unit nuclear norm "
                   "(predictive t on its log; consistent as --svm-sentences grows, blind to heads whose attention "
                   "falls off gradually). The margin ratio's p-value is reported either way (p_margin_ratio).")
@click.option("--null-stop/--no-null-stop", cls=_Setting,
              help="Draw each head's verdict nulls one at a time and stop once no further draw could change any "
                   "head's verdict (a proven bound; none for a head without a certified SVM; the row says why, "
                   "column null_stop). --no-null-stop: all --null-draws for every head.")
@click.option("--spectrum-draws", cls=_Setting, type=int,
              help="Spectrum nulls per head drawn beside a verdict of another --null-kind, for the descriptive "
                   "spectrum_* columns (default: as many as --null-draws; never stopped early). At large "
                   "--svm-sentences they cost about three times the sink nulls: 2 gives their mean and sd.")
@click.option("--baseline-max-m", cls=_Setting, type=int,
              help="Draw the secondary random-selection baseline only at SVM sentence counts m <= this (default: at "
                   "every m). At large m the baseline is most of a head's cost and answers nothing the nulls do not.")
@click.option("--transplant-draws", cls=_Setting, type=int,
              help="Other heads of the model applied to each head's states (transplant null: descriptive columns "
                   "transplant_*, outside the verdict; a GPT-2 head reads this layer's ln_1 output). Not for --query "
                   "all.")
@click.option("--device", cls=_Setting,
              help="Torch device for the nuclear SVM solves' dense algebra, e.g. cuda (needs torch; default: numpy "
                   "on the CPU). Same certified optima.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--max-memory", default=None,
              help="Memory limit for the forward pass and each SVM, e.g. 4G (default: $ATTNSVM_MAX_MEMORY, else 80% "
                   "of available).")
@click.option("--model", "model_dir", type=click.Path(), default=None,
              help="Local model directory written by save_pretrained (config.json, weights, tokenizer files): a "
                   "BERT-like encoder, a GPT-2-like decoder or a rotary Llama/GPT-NeoX decoder (default: the shipped "
                   "MiniLM). Never downloads.")
@click.option("--workers", type=int, default=None,
              help="Share the heads among N local worker processes (Dask; the run is stored: not with --no-store).")
@click.option("--scheduler", default=None, help="Share the heads among the workers of a Dask scheduler, e.g. "
                                                "tcp://host:8786 (not with --no-store).")
@click.option("--connect-timeout", type=float, default=20.0, show_default=True,
              help="Seconds to wait for the Dask scheduler before giving up with an error.")
def probe(layers, heads, sentences_file, n_sentences, svm_sentences, threshold, query, seed, query_seed, max_length, out,
          no_store, view_sentences, null_draws, null_kind, statistic, null_stop, spectrum_draws, baseline_max_m,
          transplant_draws, device,
          as_json, max_memory, model_dir, workers, scheduler, connect_timeout):
    """Probe a pretrained model's attention heads (default: MiniLM) against the max-margin picture.

    For each layer and head: W_h from the key and query weights, the tokens the head
    selects on real sentences, the nuclear-norm Gen-SVM for those selections, and the
    correlation of W_h with it (or, with --statistic margin_ratio, the head's own margin on its
    selections over the SVM's) against null heads (by default sink nulls, which keep the
    head's attention sink; spectrum nulls beside them) for a verdict per head: beyond
    null / not distinguishable / below null / no SVM, Benjamini-Yekutieli over the probed
    heads; with several --svm-sentences also a stable verdict across them. Secondary:
    random selections of the same sizes.
    Each run is stored as it goes (--out DIR, default ./attnsvm-probe/<hash of the settings>, named in the first
    line): the same command resumes a stopped run. --no-store runs in this process and writes nothing.
    Needs the extra: pip install 'attnsvm[real]'.
    """
    from attnsvm.cli.probe import run_probe

    if no_store and out is not None:
        raise UserError("--no-store writes nothing and --out names where to write: give one of them")
    out = _outdir(out) if out is not None else None
    svm = _int_list(svm_sentences, "--svm-sentences")
    if svm_sentences is not None and not svm:
        raise UserError(f"--svm-sentences expects comma-separated integers, got {svm_sentences!r}")
    try:  # the settings left unset are None: ProbeConfig's defaults, validated there once
        text = run_probe(_int_list(layers, "--layers"), _int_list(heads, "--heads"), sentences_file, n_sentences,
                         out, as_json, svm_sentences=svm[0] if svm and len(svm) == 1 else svm, threshold=threshold,
                         query=query, seed=seed, max_length=max_length, max_memory=_max_memory(max_memory),
                         model=model_dir, view_sentences=view_sentences, workers=workers,
                         scheduler=scheduler, connect_timeout=connect_timeout, progress_bar=not as_json,
                         null_draws=null_draws, transplant_draws=transplant_draws, device=device,
                         null_stop=null_stop, null_kind=null_kind, baseline_max_m=baseline_max_m,
                         query_seed=query_seed, spectrum_draws=spectrum_draws, store=not no_store, statistic=statistic,
                         announce=lambda line: click.echo(printable(line), err=as_json))
    except ValidationError as exc:
        raise UserError(_option_named(str(exc), click.get_current_context())) from None
    click.echo(printable(text, keep="\n"))  # the text may quote names read from the model's files


def _option_named(message: str, ctx) -> str:
    """``message`` of a ProbeConfig setting (``"null_draws: ..."``, :func:`attnsvm.real.probe_config.probe_config`)
    with the setting's name replaced by its option's (``"--null-draws: ..."``); other messages as they are."""
    for p in ctx.command.params:
        if isinstance(p, _Setting) and message.startswith(f"{p.setting}:"):
            return p.opts[0] + message[len(p.setting):]
    return message


# -------------------------------------------------------------- experiments
def _run_one(experiment, config, out, workers, scheduler, connect_timeout=20.0, max_memory=None, worker_timeout=60.0,
             lock_timeout=3600.0):
    from attnsvm.runner import run_experiment

    summary = run_experiment(experiment, config, out, workers=workers, scheduler=scheduler, progress=True,
                             connect_timeout=connect_timeout, max_memory=max_memory, worker_timeout=worker_timeout,
                             lock_timeout=lock_timeout)
    return print_summary(summary)


def print_summary(summary):
    """Print one experiment's line, its failed, inconclusive and finding checks and failed tasks; returns it."""
    from attnsvm.experiments.checks import count_verdicts
    from attnsvm.report import inconclusive_reason, stored_experiment_cost, value_text
    from attnsvm.runner.costs import experiment_cost_text

    v = count_verdicts(summary.checks)
    cost = experiment_cost_text(stored_experiment_cost(summary.outdir))  # the time its meta.json records
    click.echo(f"{summary.name}: {summary.tasks} task(s) ({summary.computed} computed, {summary.resumed} resumed, "
               f"{len(summary.failed)} failed), checks: {v['pass']} pass, {v['fail']} fail, {v['inconclusive']} "
               f"inconclusive, {v['finding']} findings of {len(summary.checks)}, "
               f"{cost} -> {summary.outdir}")
    for c in summary.checks:
        verdict = c.get("verdict") or ("pass" if c["passed"] else "fail")
        if verdict == "finding":
            click.echo(f"  finding (listed, does not fail the run) {c['name']}: value {value_text(c['value'])} "
                       f"{c['threshold']}", err=True)
        elif verdict == "fail":
            click.echo(f"  FAILED check {c['name']}: value {value_text(c['value'])} {c['threshold']}", err=True)
        elif verdict == "inconclusive":
            click.echo(f"  inconclusive ({inconclusive_reason(c)}) {c['name']}: value {value_text(c['value'])} "
                       f"{c['threshold']}", err=True)
        elif c.get("finding_resolved"):
            click.echo(f"  NOTE listed finding now passes (remove it from findings.txt): {c['name']}", err=True)
    for f in summary.failed:
        click.echo(f"  FAILED task {f['key']} {json.dumps(f['params'])}: {printable(f['error'])}", err=True)
    for r in summary.recomputed:
        click.echo(f"  recomputed task {r['key']}: its stored shard could not be used ({printable(r['error'])}); "
                   f"set aside as {r['moved_to']}", err=True)
    return summary


def _finish(summaries, skipped, allow_failures: bool) -> None:
    """Print "N checks: P pass, F fail, I inconclusive, K findings, S experiments skipped" and exit 1 on a
    fail (inconclusive checks and listed findings do not change the exit status)."""
    from attnsvm.experiments.checks import count_verdicts

    checks = [c for s in summaries for c in s.checks]
    v = count_verdicts(checks)
    tasks = sum(len(s.failed) for s in summaries)
    line = (f"{len(checks)} checks: {v['pass']} pass, {v['fail']} fail, {v['inconclusive']} inconclusive, "
            f"{v['finding']} findings, {len(skipped)} experiments skipped")
    if tasks:
        line += f"; {tasks} task(s) failed"
    click.echo(line)
    if (v["fail"] or tasks) and not allow_failures:
        click.echo("attnsvm: checks or tasks failed (exit status 1; --allow-failures exits 0)", err=True)
        sys.exit(1)


def _outdir(out: str) -> str:
    """--out must name a folder (an empty path would scatter results in the working directory)."""
    if not out or not out.strip():
        raise UserError("--out must name a folder, got an empty path ''")
    if "\0" in out:
        raise UserError(f"--out must be a folder path without NUL characters, got {out!r}")
    return out


def _experiment(name):
    from attnsvm.experiments import registry

    reg = registry()
    if name not in reg:
        raise UserError(f"unknown experiment {name!r}; 'attnsvm list' shows the {len(reg)} available")
    return reg[name]


def _max_memory(text):
    if text is None:
        return None
    from attnsvm.memory import parse_size

    return parse_size(text, "--max-memory")


_workers_opt = click.option("--workers", type=int, default=None,
                            help="Start a local Dask cluster with N worker processes (at most 4 per CPU).")
_reproduce_workers_opt = click.option(
    "--workers", type=int, default=None,
    help="1: run everything in this process; N > 1: each experiment in turn on a local Dask cluster with N worker "
         "processes (at most 4 per CPU). Default: one pool of local processes, one per CPU, shared by the tasks of "
         "all the experiments.")
_scheduler_opt = click.option("--scheduler", default=None, help="Address of a running Dask scheduler, e.g. tcp://host:8786.")
_timeout_opt = click.option("--connect-timeout", type=float, default=20.0, show_default=True,
                            help="Seconds to wait for the Dask scheduler before giving up with an error.")
_worker_timeout_opt = click.option("--worker-timeout", type=float, default=60.0, show_default=True,
                                  help="Seconds to wait for a first worker of --scheduler before giving up with an error.")
_lock_timeout_opt = click.option("--lock-timeout", type=float, default=3600.0, show_default=True,
                                 help="Seconds to wait while another run uses an experiment's folder before giving up "
                                      "with an error naming its process.")
_memory_opt = click.option("--max-memory", default=None,
                           help="Memory limit per task, e.g. 4G (default: $ATTNSVM_MAX_MEMORY, else 80% of available).")
_allow_opt = click.option("--allow-failures", is_flag=True,
                          help="Exit 0 even when checks fail (by default a failed check that is not a listed finding exits 1).")



def _runner_options(workers_opt):
    """The options ``run`` and ``reproduce`` share, in their order on --help: ``workers_opt`` (each command words
    --workers its own way), --scheduler, --connect-timeout, --worker-timeout, --lock-timeout, --max-memory,
    --allow-failures."""
    def apply(f):
        for opt in reversed((workers_opt, _scheduler_opt, _timeout_opt, _worker_timeout_opt, _lock_timeout_opt,
                             _memory_opt, _allow_opt)):
            f = opt(f)
        return f
    return apply

@cli.command("list")
@click.option("--out", "outdir", default=None, metavar="DIR",
              help="Then list the runs stored in the results folder DIR: each experiment's recorded wall and CPU "
                   "time and the tasks it reused, and the run's (what its report's banner says).")
def list_cmd(outdir):
    """List the experiments by paper: name, the extra it needs, its measured quick time, title.

    Reads the catalog shipped beside this module (``cli/experiments.json``, written by
    ``scripts/catalog.py`` from the registry and a timed ``reproduce --quick``), so it answers
    without importing the experiments. With ``--out DIR``, also the times the runs stored in DIR
    recorded (their meta.json and run.json, :mod:`attnsvm.runner.costs`).
    """
    from attnsvm.cli.catalog import format_catalog, load_catalog

    stored = None if outdir is None else _stored_runs_text(_outdir(outdir))  # a bad folder: one line, nothing else
    click.echo(format_catalog(load_catalog()))
    if stored is not None:
        click.echo("")
        click.echo(stored)


def _stored_runs_text(outdir: str) -> str:
    """The runs stored in ``outdir`` as their records give them: one line per experiment (name, preset, its
    recorded wall and CPU time, what it reused), then the run's time (the report banner's sentence)."""
    from attnsvm.report import stored_cost
    from attnsvm.runner.costs import experiment_cost_text, run_cost_text

    cost = stored_cost(outdir)
    lines = [f"Stored in {printable(outdir)} (recorded by the runs that wrote them):"]
    for e in cost.experiments:
        lines.append(f"  {printable(e.name):<24} {e.n_tasks:>4} task(s)  {experiment_cost_text(e)}")
    lines.append(f"Run: {run_cost_text(cost)}")
    return "\n".join(lines)


@cli.command()
@click.argument("name")
@click.option("--quick", is_flag=True, help="Use the small preset (seconds instead of minutes).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, help="YAML file of config overrides.")
@click.option("--out", default="results", show_default=True, help="Output folder.")
@_runner_options(_workers_opt)
def run(name, quick, sets, config_file, out, workers, scheduler, connect_timeout, worker_timeout, lock_timeout,
        max_memory, allow_failures):
    """Run (or resume) experiment NAME; results go to OUT/NAME/.

    Exits 1 when a check fails (other than a listed finding) or a task fails.
    """
    from attnsvm.experiments import build_config, parse_assignments, read_config_file
    from attnsvm.report import write_report

    out = _outdir(out)
    exp = _experiment(name)
    if exp.missing():
        raise UserError(f"{name} needs {', '.join(exp.missing())}, which is not installed: {exp.install_hint}")
    try:
        file_overrides = read_config_file(config_file) if config_file else None
    except ValidationError as exc:
        raise UserError(f"--config: {exc}") from None
    config = build_config(exp, quick=quick, file_overrides=file_overrides, overrides=parse_assignments(sets))
    summary = _run_one(exp, config, out, workers, scheduler, connect_timeout, _max_memory(max_memory), worker_timeout,
                       lock_timeout)
    write_report(out)
    _finish([summary], [], allow_failures)


@cli.command()
@click.option("--quick", is_flag=True, help="Small presets of every experiment (a few minutes).")
@click.option("--out", default="results", show_default=True, help="Output folder.")
@click.option("--only", multiple=True, help="Restrict to these experiments (repeatable; a name given twice runs once).")
@_runner_options(_reproduce_workers_opt)
def reproduce(quick, out, only, workers, scheduler, connect_timeout, worker_timeout, lock_timeout, max_memory,
              allow_failures):
    """Run every experiment, then write OUT/report.html and OUT/report.md.

    Without --workers or --scheduler the tasks of all the experiments share one pool of local
    processes, one per CPU (at most one per task; one thread each), longest work first, and each
    experiment is written as soon as its tasks are in: the tables are the same as with --workers 1,
    which runs everything in this process. --workers N runs each experiment
    in turn on a local Dask cluster of N processes.

    Exits 1 when a check fails (other than a listed finding) or a task fails.
    """
    import os
    import time

    from attnsvm._files import oserror_text
    from attnsvm.experiments import build_config, registry
    from attnsvm.report import SKIPPED_FILE, record_run, record_skipped, skipped_file_problem, stored_cost, write_report
    from attnsvm.runner.costs import run_cost_text

    # this process's CPU; the worker processes' CPU is what their tasks recorded (meta.json task_cpu_seconds)
    t0, cpu0 = time.perf_counter(), time.process_time()
    out = _outdir(out)
    problem = skipped_file_problem(out)    # found now, not after computing everything
    if problem is not None:
        raise ValidationError(problem)
    skipped_path = os.path.join(out, SKIPPED_FILE)
    reg = registry()
    names = list(dict.fromkeys(only)) if only else list(reg)
    for name in names:
        _experiment(name)
    from attnsvm.runner import run_experiments

    limit = _max_memory(max_memory)
    jobs, skipped = [], []
    for name in names:
        if reg[name].missing():
            reason = f"needs {', '.join(reg[name].missing())}, which is not installed"
            click.echo(f"{name}: skipped, {reason} ({reg[name].install_hint})", err=True)
            skipped.append({"name": name, "title": reg[name].title, "reason": reason, "hint": reg[name].install_hint})
            continue
        jobs.append((reg[name], build_config(reg[name], quick=quick)))
    summaries = run_experiments(jobs, out, workers=workers, scheduler=scheduler, progress=True,
                                connect_timeout=connect_timeout, max_memory=limit, worker_timeout=worker_timeout,
                                on_done=print_summary, lock_timeout=lock_timeout)
    try:
        record_skipped(out, skipped, ran=[s.name for s in summaries])
    except OSError as exc:  # e.g. replaced by a folder during the run: the report is still written
        unwritten = f"cannot write {skipped_path}: {oserror_text(exc, skipped_path)}"
    except ValidationError as exc:  # the same, found by record_skipped's own check
        unwritten = str(exc)
    else:
        unwritten = None
    record_run(out, time.perf_counter() - t0, time.process_time() - cpu0, [s.name for s in summaries],
               "quick" if quick else "full")
    html_path, _ = write_report(out)
    click.echo(f"report: {html_path}")
    click.echo(f"time: {run_cost_text(stored_cost(out))}")  # the banner's sentence, from the records just written
    if unwritten:
        raise UserError(f"{unwritten}; the report was written without the skipped experiments")
    _finish(summaries, skipped, allow_failures)


@cli.command()
@click.argument("outdir", type=click.Path(file_okay=False))
def report(outdir):
    """Write OUTDIR/report.html and report.md from finished experiments (a probe's folder, written by
    'attnsvm probe --out', gets its own page instead: OUTDIR/probe.html, rebuilt from the stored heads)."""
    from attnsvm.report import probe_folder, write_report

    outdir = _outdir(outdir)
    if probe_folder(outdir) is not None:
        from attnsvm.cli.probe import write_stored_page

        page = write_stored_page(outdir)
        click.echo(f"{printable(outdir)} is a probe's folder (attnsvm probe --out): wrote its page {printable(page)} "
                   "from the stored heads (no SVM solved again; the reproduction report is for 'attnsvm reproduce' "
                   "folders)")
        return
    html_path, md_path = write_report(outdir)
    click.echo(f"report: {html_path} and {md_path}")


def main(argv=None):
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="attnsvm", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover
        click.echo("attnsvm: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
