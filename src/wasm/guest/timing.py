# IPython's timing and profiling magics: %time / %%time, %timeit / %%timeit, %prun /
# %%prun (and %run's -t and -p), with IPython's options and output.

__sandbox_internal__ = True

import time

import _sandbox_api as api
from _sandbox_cell_code import column_of, compiled, magic, parse_at, run_compiled, run_tree, where
from _sandbox_shell import UsageError


def format_time(timespan, precision=3):
    """A duration as IPython writes it: `1.23 ms`, `45.6 μs`, `2min 3s`."""
    import math

    if timespan >= 60.0:
        parts, leftover = [], timespan
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            value = int(leftover / length)
            if value > 0:
                leftover = leftover % length
                parts.append(f"{value}{suffix}")
            if leftover < 1:
                break
        return " ".join(parts)
    units, scaling = ["s", "ms", "μs", "ns"], [1, 1e3, 1e6, 1e9]
    order = min(-int(math.floor(math.log10(timespan)) // 3), 3) if timespan > 0 else 3
    return "%.*g %s" % (precision, timespan * scaling[order], units[order])


def cpu_time():
    """The interpreter's CPU time, as the host measures it (see posix_user.py)."""
    return time.process_time()


@magic("line_cell", expand=False, frame=True)
def time_(line="", cell=None, frame=None):
    """%time stmt / %%time: runs once and prints the CPU and wall time, as IPython does;
    the value of a last expression is handed back."""
    if line.strip() and cell is not None:
        raise UsageError("Can't use statement directly after '%%time'!")
    filename, at = where(frame)
    if cell is None:
        tree = parse_at(line, filename, at, column_of(line, frame))
    else:
        tree = parse_at(cell, filename, at + 1)
    local_ns = frame.f_locals if frame.f_locals is not frame.f_globals else None
    wall, cpu = time.perf_counter(), cpu_time()
    try:
        value = run_tree(tree, filename, api.namespace, local_ns)
    finally:
        cpu, wall = cpu_time() - cpu, time.perf_counter() - wall
        # As IPython prints it where there is no `resource` module (WASI): the process
        # clock as user time, no system time.
        print(f"CPU times: user {format_time(cpu)}, sys: {format_time(0.0)}, total: {format_time(cpu)}")
        print(f"Wall time: {format_time(wall)}")
    return value


class TimeitResult:
    """What %timeit -o hands back: loops, repeat, best, worst, all_runs, average, stdev."""

    def __init__(self, loops, repeat, best, worst, all_runs, compile_time, precision):
        self.loops, self.repeat, self.best, self.worst = loops, repeat, best, worst
        self.all_runs, self.compile_time, self._precision = all_runs, compile_time, precision
        self.timings = [dt / loops for dt in all_runs]

    @property
    def average(self):
        import math

        return math.fsum(self.timings) / len(self.timings)

    @property
    def stdev(self):
        import math

        mean = self.average
        return (math.fsum((x - mean) ** 2 for x in self.timings) / len(self.timings)) ** 0.5

    def __str__(self):
        return "{} ± {} per loop (mean ± std. dev. of {} run{}, {:,} loop{} each)".format(
            format_time(self.average, self._precision), format_time(self.stdev, self._precision),
            self.repeat, "" if self.repeat == 1 else "s", self.loops, "" if self.loops == 1 else "s")

    def __repr__(self):
        return f"<TimeitResult : {self}>"


def timeit_options(line):
    """%timeit's options (-n N -r R -p P -q -o -t -c -v V) and the statement after them."""
    options, rest = {}, line.lstrip()
    while rest.startswith("-") and len(rest) > 1 and rest[1] in "nrpqotcv":
        flag, rest = rest[1], rest[2:]
        if flag in "nrpv":
            rest = rest.lstrip()
            value, _, rest = rest.partition(" ")
            options[flag] = value
        else:
            options[flag] = True
        rest = rest.lstrip()
    return options, rest


@magic("line_cell", expand=False, frame=True)
def timeit(line="", cell=None, frame=None):
    """%timeit stmt / %%timeit setup: times many runs, as IPython does (enough loops for
    0.2 s, 7 repeats unless -n and -r say otherwise)."""
    import ast
    import gc

    options, stmt = timeit_options(line)
    if not stmt.strip() and cell is None:
        return None
    number, repeat = int(options.get("n", 0)), int(options.get("r", 7))
    precision = int(options.get("p", 3))
    filename, at = where(frame)
    if cell is None:
        setup, body = ast.parse("pass"), parse_at(stmt, filename, at, column_of(stmt, frame))
    else:
        setup, body = parse_at(stmt or "pass", filename, at), parse_at(cell, filename, at + 1)
    template = ast.parse("def inner(_it, _timer):\n    pass\n    _t0 = _timer()\n    for _i in _it:\n        pass\n    _t1 = _timer()\n    return _t1 - _t0\n")
    inner = template.body[0]
    inner.body[0:1] = setup.body or [ast.Pass()]
    loop = next(node for node in inner.body if isinstance(node, ast.For))
    loop.body = body.body or [ast.Pass()]
    ast.fix_missing_locations(template)
    started = time.perf_counter()
    code = compile(template, filename, "exec")
    compile_time = time.perf_counter() - started
    scope = {}
    exec(code, api.namespace, scope)
    inner = scope["inner"]
    timer = time.perf_counter

    def measure(n):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return inner(iter(range(n)), timer)
        finally:
            if enabled:
                gc.enable()

    if number == 0:
        for index in range(10):
            number = 10 ** index
            if measure(number) >= 0.2:
                break
    runs = [measure(number) for _ in range(repeat)]
    result = TimeitResult(number, repeat, min(runs) / number, max(runs) / number, runs, compile_time, precision)
    if "q" not in options:
        if result.worst > 4 * result.best > 0 and result.worst > 1e-6:
            print("The slowest run took %0.2f times longer than the fastest. This could mean that "
                  "an intermediate result is being cached." % (result.worst / result.best))
        print(result)
        if compile_time > 0.1:
            print("Compiler time: %.2f s" % compile_time)
    if "v" in options:
        api.namespace[options["v"]] = result
    return result if "o" in options else None


# %prun's options (as IPython's getopt string "D:l:rs:T:q"): those that take a value.
PRUN_VALUED = "DlsT"
PRUN_FLAGS = "rq"


def prun_options(line):
    """%prun's options, as a dict of lists, and the statement after them."""
    options, rest = {}, line.lstrip()
    while len(rest) > 1 and rest[0] == "-" and rest[1] in PRUN_VALUED + PRUN_FLAGS:
        flag, rest = rest[1], rest[2:]
        if flag in PRUN_VALUED:
            rest = rest.lstrip()
            if not rest:
                raise UsageError(f"option -{flag} requires argument ( allowed: \"D:l:rs:T:q\")")
            value, _, rest = rest.partition(" ")
            options.setdefault(flag, []).append(value)
        else:
            options[flag] = [True]
        rest = rest.lstrip()
    return options, rest


@magic("line_cell", expand=False, frame=True)
def prun(line="", cell=None, frame=None):
    """%prun [-s key] [-l limit] [-q] [-r] [-T file] [-D file] stmt / %%prun: runs under
    the profiler and prints its report, as IPython does."""
    options, stmt = prun_options(line)
    filename, at = where(frame)
    if cell is None:
        tree = parse_at(stmt, filename, at, column_of(stmt, frame))
    else:
        tree = parse_at(cell, filename, at + 1)
    parts = compiled(tree, filename)
    return profiled(lambda: run_compiled(parts, api.namespace), options)


def profiled(run, options):
    """Runs `run()` under the profiler and reports as %prun's `options` ask: sorted by
    -s (internal time by default), limited by -l, saved with -T (text) and -D (stats),
    printed unless -q; the pstats.Stats with -r."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    try:
        run()
    finally:
        profile.disable()
        text = io.StringIO()
        stats = without_sandbox_frames(pstats.Stats(profile, stream=text))
        stats.sort_stats(*(options.get("s") or ["time"]))
        stats.print_stats(*[limit(value) for value in options.get("l", [])])
        if "q" not in options:
            print(text.getvalue(), end="")
        for path in options.get("T", []):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.getvalue())
            print(f"\n*** Profile printout saved to text file {path!r}.")
        for path in options.get("D", []):
            stats.dump_stats(path)
            print(f"\n*** Profile stats marshalled to file {path!r}.")
    return stats if "r" in options else None


# The profiler's own entry: its switching off, at the end of the run.
PROFILER_OFF = ("~", 0, "<method 'disable' of '_lsprof.Profiler' objects>")


def without_sandbox_frames(stats):
    """`stats` without the entries of the sandbox's own code that ran the profiled code
    (what is left is the code's own calls, and its totals)."""
    stats.stats = {key: value for key, value in stats.stats.items()
                   if not key[0].startswith("<sandbox ") and key != PROFILER_OFF}
    stats.total_calls = sum(value[1] for value in stats.stats.values())
    stats.prim_calls = sum(value[0] for value in stats.stats.values())
    stats.total_tt = sum(value[2] for value in stats.stats.values())
    return stats


def limit(value):
    """A -l value as pstats takes it: a count, a fraction, or a regular expression."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def timed(run):
    """Runs `run()` and prints the times %run -t prints."""
    wall, cpu = time.perf_counter(), cpu_time()
    try:
        run()
    finally:
        cpu, wall = cpu_time() - cpu, time.perf_counter() - wall
        print("\nIPython CPU timings (estimated):")
        print(f"  User   : {cpu:10.2f} s.")
        print(f"  System : {0.0:10.2f} s.")
        print(f"Wall time: {wall:10.2f} s.")
