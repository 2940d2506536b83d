//! Corpus idioms: magics, shell lines, pip and the IPython API (`%pip`,
//! `%time`, `%%capture`, `%who`, `!ls`, `%history`, `%precision`,
//! `get_ipython()`, `obj?`...).

use super::*;

/// The idioms of this part of the corpus.
pub const IDIOMS: &[Idiom] = &[
    Idiom {
        name: "%pip install, then import on the next line",
        cells: &["%pip install humanize\nimport humanize\nhumanize.intcomma(1234567)"],
        check: |o| {
            stdout_has(o, &["Successfully installed humanize-4.17.0"])?;
            value_is(o, "'1,234,567'")
        },
    },
    Idiom {
        name: "!pip install",
        cells: &["!pip install humanize\nimport humanize\nhumanize.naturalsize(1000000)"],
        check: |o| value_is(o, "'1.0 MB'"),
    },
    Idiom {
        name: "pip install alone in a cell (automagic)",
        cells: &[
            "pip install humanize",
            "import humanize\nhumanize.ordinal(3)",
        ],
        check: |o| value_is(o, "'3rd'"),
    },
    Idiom {
        name: "subprocess running python -m pip",
        cells: &[
            "import subprocess, sys\nsubprocess.check_call([sys.executable, '-m', 'pip', 'install', 'humanize'])\nimport humanize\nhumanize.apnumber(4)",
        ],
        check: |o| {
            stdout_has(o, &["Successfully installed humanize"])?;
            value_is(o, "'four'")
        },
    },
    Idiom {
        name: "pip.main",
        cells: &[
            "import pip\ncode = pip.main(['install', 'humanize'])\nimport humanize\n(code, humanize.intword(1200000))",
        ],
        check: |o| value_is(o, "(0, '1.2 million')"),
    },
    Idiom {
        name: "%pip install of a package built into the runtime",
        cells: &["%pip install six"],
        check: |o| {
            stdout_has(
                o,
                &["Requirement already satisfied: six in the runtime (1.17.0)"],
            )
        },
    },
    Idiom {
        name: "%pip install -q says nothing",
        cells: &["%pip install -q humanize\nimport humanize"],
        check: |o| {
            clean(o)?;
            expect(o.stdout().is_empty(), || {
                format!("stdout: {:?}", o.stdout())
            })
        },
    },
    Idiom {
        name: "%pip install of an unknown package prints pip's error and carries on",
        cells: &["%pip install no-such-package-anywhere\nprint('after')"],
        check: |o| {
            stdout_has(o, &["after"])?;
            stderr_has(o, "ERROR: ")?;
            stderr_has(o, "no-such-package-anywhere")
        },
    },
    Idiom {
        name: "%conda says to use %pip",
        cells: &["%conda install numpy"],
        check: |o| {
            expect(o.error() == "UsageError", || o.error_text())?;
            expect(o.error_text().contains("%pip install"), || o.error_text())
        },
    },
    Idiom {
        name: "%matplotlib inline and a plot",
        cells: &[
            "%matplotlib inline\nfrom matplotlib_inline.backend_inline import set_matplotlib_formats\nset_matplotlib_formats('retina')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png"], || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "a trailing `;` keeps the plot and hides the value",
        cells: &["import matplotlib.pyplot as plt\nplt.plot([1, 2]);"],
        check: |o| {
            clean(o)?;
            expect(!o.has_value(), || format!("value {:?}", o.value()))?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "%config and %load_ext autoreload",
        cells: &[
            "%config InlineBackend.figure_format = 'retina'\n%load_ext autoreload\n%autoreload 2\n'ok'",
        ],
        check: |o| value_is(o, "'ok'"),
    },
    Idiom {
        name: "%time of a statement, then its value",
        cells: &["%time total = sum(range(10**5))\ntotal"],
        check: |o| {
            stdout_has(
                o,
                &["CPU times: user ", ", sys: ", ", total: ", "Wall time: "],
            )?;
            value_is(o, "4999950000")
        },
    },
    Idiom {
        name: "%time of an expression gives its value",
        cells: &["%time sum(range(10))"],
        check: |o| {
            stdout_has(o, &["Wall time: "])?;
            value_is(o, "45")
        },
    },
    Idiom {
        name: "%time and time.process_time count CPU time, not time spent asleep",
        cells: &[
            "import time\n%time time.sleep(0.3)\nstart = time.process_time()\ntime.sleep(0.3)\nslept = time.process_time() - start\nstart = time.process_time()\nwhile time.process_time() - start < 0.1:\n    pass\nimport os\n(slept < 0.05, time.process_time() - start >= 0.1, os.times().user >= 0.1 and os.times().elapsed > 0)",
        ],
        check: |o| {
            // "CPU times: user 1.2 ms, sys: 0 ns, total: 1.2 ms": under a tenth of the
            // 300 ms it slept.
            let line = o.stdout().lines().find(|l| l.starts_with("CPU times:"));
            let total = line.and_then(|l| l.rsplit("total: ").next()).unwrap_or("");
            let small = match total.split_once(' ') {
                Some((_, "ns" | "μs")) => true,
                Some((ms, "ms")) => ms.parse::<f64>().is_ok_and(|ms| ms < 30.0),
                _ => false,
            };
            expect(small, || o.stdout().to_owned())?;
            value_is(o, "(True, True, True)")
        },
    },
    Idiom {
        name: "%timeit",
        cells: &["%timeit -n 5 -r 2 sum(range(100))"],
        check: |o| {
            stdout_has(o, &[" per loop (mean ± std. dev. of 2 runs, 5 loops each)"])?;
            expect(!o.has_value(), || o.value().to_owned())
        },
    },
    Idiom {
        name: "%%time over a cell",
        cells: &["%%time\nsquares = [i * i for i in range(1000)]\nlen(squares)"],
        check: |o| {
            stdout_has(o, &["Wall time: "])?;
            value_is(o, "1000")
        },
    },
    Idiom {
        name: "%%timeit with setup",
        cells: &["%%timeit -n 3 -r 2 data = list(range(50))\nsorted(data)"],
        check: |o| stdout_has(o, &[" per loop (mean ± std. dev. of 2 runs, 3 loops each)"]),
    },
    Idiom {
        name: "%%capture keeps the output for later",
        cells: &[
            "%%capture captured\nprint('hidden')\nimport sys; print('oops', file=sys.stderr)",
            "(captured.stdout, captured.stderr)",
        ],
        check: |o| value_is(o, "('hidden\\n', 'oops\\n')"),
    },
    Idiom {
        name: "%%capture shows nothing",
        cells: &["%%capture\nprint('hidden')"],
        check: |o| {
            clean(o)?;
            expect(o.stdout().is_empty(), || o.stdout().to_owned())
        },
    },
    Idiom {
        name: "%who and %whos",
        cells: &["alpha = 123\nbeta = 'test'\n%who\n%whos"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "alpha\t beta\t \n",
                    "Variable   Type    Data/Info\n----------------------------\nalpha      int     123\nbeta       str     test\n",
                ],
            )
        },
    },
    Idiom {
        name: "%env sets and reads the environment",
        cells: &["%env MY_FLAG=on\nimport os\nflag = %env MY_FLAG\n(os.environ['MY_FLAG'], flag)"],
        check: |o| value_is(o, "('on', 'on')"),
    },
    Idiom {
        name: "!ls: no shell, and what to use",
        cells: &["!ls -la\nprint('went on')"],
        check: |o| {
            stdout_has(o, &["went on"])?;
            stderr_has(
                o,
                "there is no shell in this sandbox, so `ls -la` cannot run; use os.listdir('.')",
            )
        },
    },
    Idiom {
        name: "files = !ls is an error, not a file list",
        cells: &["files = !ls\nlen(files)"],
        check: |o| {
            expect(o.error() == "NoShellError", || o.error_text())?;
            expect(
                o.error_text().contains(
                    "there is no shell in this sandbox, so `ls` cannot run; use os.listdir('.')",
                ),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "a module written with %%writefile imports, a package too",
        cells: &[
            "%%writefile helpers.py\ndef double(x):\n    return 2 * x\n",
            "import os\nos.makedirs('src', exist_ok=True)\nopen('src/__init__.py', 'w').close()\nopen('src/utils.py', 'w').write('TAX = 0.2\\n')",
            "import helpers\nfrom src.utils import TAX\nhelpers.double(21), TAX",
        ],
        check: |o| value_is(o, "(42, 0.2)"),
    },
    Idiom {
        name: "a missing package says how packages install here",
        cells: &["import plotly.express as px"],
        check: |o| {
            expect(o.error() == "ModuleNotFoundError", || o.error_text())?;
            let said = o.error_text();
            expect(
                said.contains("No module named 'plotly': it is neither built into this runtime nor installed. `%pip install plotly`")
                    && !said.contains("Site initialization"),
                || said.clone(),
            )
        },
    },
    Idiom {
        name: "In, Out, _, __, ___, _<n>, _i",
        cells: &[
            "10 + 5",
            "x = 2",
            "'abc'",
            "print(_, __, ___, _1, Out[1], Out, In[1], In[2], _i, _ii, _i4, len(In))",
        ],
        // What IPython 9 prints for the same cells.
        check: |o| {
            stdout_has(
                o,
                &[
                    "abc 15  15 15 {1: 15, 3: 'abc'} 10 + 5 x = 2 'abc' x = 2 print(_, __, ___, _1, Out[1], Out, In[1], In[2], _i, _ii, _i4, len(In)) 5\n",
                ],
            )
        },
    },
    Idiom {
        name: "breakpoint() and pdb.set_trace() say there is no debugger, and the code goes on",
        cells: &["x = 1\nbreakpoint()\nimport pdb; pdb.set_trace()\nprint('went on', x)"],
        check: |o| {
            stdout_has(o, &["went on 1\n"])?;
            stderr_has(
                o,
                "[breakpoint ignored: the debugger needs input, which the sandbox does not have",
            )
        },
    },
    Idiom {
        name: "pandas display options the code sets are kept",
        cells: &[
            "import pandas as pd\ndf = pd.DataFrame({'n': range(70), 'text': ['x' * 80] * 70})",
            "df",
            "pd.set_option('display.max_rows', None)\npd.set_option('display.max_colwidth', None)\ndf",
        ],
        check: |o| {
            let lines: Vec<&str> = o.value().lines().collect();
            expect(lines.len() == 71, || {
                format!("{} lines: {}", lines.len(), o.value())
            })?;
            expect(lines[70].contains(&"x".repeat(80)), || o.value().to_owned())
        },
    },
    Idiom {
        name: "asyncio.create_task() in a cell without await runs between cells",
        cells: &[
            "import asyncio\nasync def fetch(n):\n    await asyncio.sleep(0.2)\n    print('fetched', n)\n    return n * 10\nasync def quick():\n    return 'q'\ntask = asyncio.create_task(fetch(4))\nq = asyncio.ensure_future(quick())\nloop = asyncio.get_event_loop()\nprint(task.done())",
            "import time\ntime.sleep(0.3)",
            "print(task.done(), task.result(), q.result())\nr = await asyncio.gather(fetch(1), fetch(2))\nr, loop.run_until_complete(fetch(3)), asyncio.run(fetch(5))",
        ],
        check: |o| {
            stdout_has(
                o,
                &["True 40 q\nfetched 1\nfetched 2\nfetched 3\nfetched 5\n"],
            )?;
            value_is(o, "([10, 20], 30, 50)")
        },
    },
    Idiom {
        name: "df.style.format() shows the formatted values",
        cells: &[
            "import pandas as pd\ndf = pd.DataFrame({'share': [0.1234, 0.5], 'n': [1, 2]})\ndf.style.format({'share': '{:.1%}'}).highlight_max()",
        ],
        check: |o| value_is(o, "   share  n\n0  12.3%  1\n1  50.0%  2"),
    },
    Idiom {
        name: "multiprocessing.Process with a Queue",
        cells: &[
            "from multiprocessing import Process, Queue\ndef square(n, q):\n    q.put((n, n * n))\nif __name__ == '__main__':\n    q = Queue()\n    ps = [Process(target=square, args=(i, q)) for i in range(4)]\n    for p in ps: p.start()\n    for p in ps: p.join()\n(sorted(q.get() for _ in range(4)), [p.exitcode for p in ps])",
        ],
        check: |o| value_is(o, "([(0, 0), (1, 1), (2, 4), (3, 9)], [0, 0, 0, 0])"),
    },
    Idiom {
        name: "multiprocessing Pipe, Value, Array and Manager",
        cells: &[
            "import multiprocessing as mp\ndef send(conn):\n    conn.send(sum(range(10)))\ndef bump(v, a):\n    with v.get_lock():\n        v.value += 1\n    a[0] += 1\ndef fill(d, i):\n    d[i] = i * i\nmine, theirs = mp.Pipe()\np = mp.Process(target=send, args=(theirs,)); p.start(); got = mine.recv(); p.join()\nv, a = mp.Value('i', 0), mp.Array('i', 3)\nps = [mp.get_context('spawn').Process(target=bump, args=(v, a)) for _ in range(3)]\n[p.start() for p in ps]; [p.join() for p in ps]\nwith mp.Manager() as m:\n    d = m.dict()\n    ps = [mp.Process(target=fill, args=(d, i)) for i in range(3)]\n    [p.start() for p in ps]; [p.join() for p in ps]\n    squares = dict(d)\n(got, v.value, list(a), squares)",
        ],
        check: |o| value_is(o, "(45, 3, [3, 0, 0], {0: 0, 1: 1, 2: 4})"),
    },
    Idiom {
        name: "a process that fails or calls os._exit() has its exit code",
        cells: &[
            "from multiprocessing import Process\nimport os\ndef bad():\n    raise ValueError('boom')\np = Process(target=bad)\np.start(); p.join()\nq = Process(target=lambda: os._exit(4))\nq.start(); q.join()\n(p.exitcode, q.exitcode)",
        ],
        check: |o| {
            value_is(o, "(1, 4)")?;
            stderr_has(o, "ValueError: boom")
        },
    },
    Idiom {
        name: "%history lists the cells run so far",
        cells: &["x = 1", "y = x + 1", "%history -n"],
        check: |o| stdout_has(o, &["   1: x = 1", "   2: y = x + 1", "   3: %history -n"]),
    },
    Idiom {
        name: "%reset forgets the code's names and keeps the notebook's",
        cells: &[
            "x = 1\nx",
            "%reset -f",
            "(len(In), 'x' in globals(), type(get_ipython()).__name__, len(Out))",
        ],
        check: |o| value_is(o, "(4, False, 'ZMQInteractiveShell', 0)"),
    },
    Idiom {
        name: "%history of a huge range lists what there is at once",
        cells: &["x = 1", "%history 1-100000000000"],
        check: |o| stdout_has(o, &["x = 1", "%history 1-100000000000"]),
    },
    Idiom {
        name: "an odd ast_node_interactivity keeps cells running",
        cells: &["get_ipython().ast_node_interactivity = 3", "1 + 1"],
        check: |o| value_is(o, "2"),
    },
    Idiom {
        name: "%precision %d shows inf as repr does",
        cells: &["%precision %d", "float('inf')"],
        check: |o| value_is(o, "inf"),
    },
    Idiom {
        name: "%precision sets numpy's printing only once the code has imported it",
        cells: &[
            "%precision 3",
            "import numpy as np\nbefore = str(np.array([1 / 3]))\n%precision 2\nprint(before, np.array([1 / 3]))",
        ],
        check: |o| stdout_is(o, "[0.33333333] [0.33]\n"),
    },
    Idiom {
        name: "%precision after %matplotlib inline (which imports numpy) sets numpy's printing",
        cells: &[
            "%matplotlib inline\n%precision 2",
            "from numpy import array\nprint(array([1 / 3]))",
        ],
        check: |o| stdout_is(o, "[0.33]\n"),
    },
    Idiom {
        name: "%precision runs no code of the namespace's objects",
        cells: &[
            "class Evil:\n    @property\n    def __class__(self):\n        raise RuntimeError('ran')\nevil = Evil()\n%precision 3\n1 / 3",
        ],
        check: |o| value_is(o, "0.333"),
    },
    Idiom {
        name: "%precision after pandas (which imports numpy) sets numpy's printing",
        cells: &[
            "import pandas as pd\n%precision 2",
            "import numpy as np\nprint(np.array([1 / 3]))",
        ],
        check: |o| stdout_is(o, "[0.33]\n"),
    },
    Idiom {
        name: "%save writes cells to a file",
        cells: &[
            "def area(r):\n    return 3.14159 * r * r",
            "%save geometry 1",
            "from geometry import area\narea(1)",
        ],
        check: |o| value_is(o, "3.14159"),
    },
    Idiom {
        name: "%precision formats floats",
        cells: &[
            "%precision 3",
            "import math\n(math.pi, [math.e], {'r': 0.5})",
        ],
        check: |o| value_is(o, "(3.142, [2.718], {'r': 0.500})"),
    },
    Idiom {
        name: "%precision formats numpy's float64 values too, as IPython does",
        cells: &[
            "import numpy as np\n%precision 3\n(np.float64(1.23456), [np.mean([1.0, 2.5])], np.float32(0.5))",
        ],
        check: |o| value_is(o, "(1.235, [1.750], np.float32(0.5))"),
    },
    Idiom {
        name: "ast_node_interactivity = 'all' shows every expression",
        cells: &[
            "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.ast_node_interactivity = 'all'",
            "x = 6\nx * 7\nx + 1",
        ],
        check: |o| {
            stdout_has(o, &["42"])?;
            value_is(o, "7")
        },
    },
    Idiom {
        name: "pools sized cpu_count() - 1",
        cells: &[
            "import os\nfrom multiprocessing import Pool\nfrom joblib import Parallel, delayed\nwith Pool(os.cpu_count() - 1) as pool:\n    squares = pool.map(abs, [-1, -2, -3])\nsquares, Parallel(n_jobs=os.cpu_count() - 1)(delayed(abs)(x) for x in [-4, -5])",
        ],
        check: |o| value_is(o, "([1, 2, 3], [4, 5])"),
    },
    Idiom {
        name: "%%bash: no shell",
        cells: &["%%bash\necho hi"],
        check: |o| {
            stderr_has(
                o,
                "there is no shell in this sandbox, so `echo hi` cannot run; use print(...)",
            )
        },
    },
    Idiom {
        name: "%%writefile, then %run",
        cells: &[
            "%%writefile greet.py\ndef greet(name):\n    return 'hi ' + name\nanswer = 42\n",
            "%run greet.py\n(greet('you'), answer)",
        ],
        check: |o| value_is(o, "('hi you', 42)"),
    },
    Idiom {
        name: "%pwd and %cd",
        cells: &[
            "import os\nos.makedirs('data', exist_ok=True)\n%cd data\nhere = %pwd\n(here, os.getcwd())",
        ],
        check: |o| {
            stdout_has(o, &["/data\n"])?;
            value_is(o, "('/data', '/data')")
        },
    },
    Idiom {
        name: "get_ipython().run_line_magic",
        cells: &[
            "ip = get_ipython()\nip.run_line_magic('matplotlib', 'inline')\nip.run_line_magic('pwd', '')",
        ],
        check: |o| value_is(o, "'/'"),
    },
    Idiom {
        name: "get_ipython().system",
        cells: &["get_ipython().system('nvidia-smi')"],
        check: |o| {
            stderr_has(
                o,
                "`nvidia-smi` cannot run; use nothing: the sandbox has no GPU",
            )
        },
    },
    Idiom {
        name: "obj? help",
        cells: &["len?"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Signature: len(obj, /)\nDocstring: Return the number of items in a container.\n",
                    "Type:      builtin_function_or_method",
                ],
            )
        },
    },
    Idiom {
        name: "%lsmagic",
        cells: &["%lsmagic"],
        check: |o| {
            clean(o)?;
            expect(
                o.value().contains("%timeit") && o.value().contains("%%capture"),
                || o.value().to_owned(),
            )
        },
    },
    Idiom {
        name: "a magic inside a loop body",
        cells: &["for i in range(2):\n    %time x = i\nx"],
        check: |o| value_is(o, "1"),
    },
    Idiom {
        name: "an error after a magic names its own line",
        cells: &["x = 1\n%time y = 2\nraise ValueError('boom')"],
        check: |o| {
            expect(o.error() == "ValueError", || o.error_text())?;
            expect(
                o.error_text().contains("line 3")
                    && o.error_text().contains("raise ValueError('boom')"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "an error inside %%time names the cell's line",
        cells: &["%%time\na = 1\nb = 1 / 0"],
        check: |o| {
            expect(o.error() == "ZeroDivisionError", || o.error_text())?;
            expect(
                o.error_text().contains("line 3") && o.error_text().contains("b = 1 / 0"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "!{sys.executable} script.py runs the script",
        cells: &[
            "import sys\nopen('s.py', 'w').write('import sys\\nprint(\"args\", sys.argv[1:])\\n')\n!{sys.executable} s.py --b 2",
        ],
        check: |o| stdout_is(o, "args ['--b', '2']\n"),
    },
    Idiom {
        name: "!pip freeze > requirements.txt writes the file, >> appends, 2>&1 takes the errors too",
        cells: &[
            "!pip freeze > requirements.txt\nopen('s.py', 'w').write('import sys\\nprint(1)\\nprint(2, file=sys.stderr)\\n')\n!python s.py >> out.txt\n!python s.py >> out.txt 2>&1\nfrozen = open('requirements.txt').read().splitlines()\n(len(frozen) > 10, all('==' in line for line in frozen), open('out.txt').read())",
        ],
        check: |o| {
            stdout_is(o, "")?;
            stderr_has(o, "2")?;
            value_is(o, "(True, True, '1\\n1\\n2\\n')")
        },
    },
    Idiom {
        name: "y = !pip freeze > file writes the file, and y holds none of it",
        cells: &["y = !pip freeze > reqs.txt\n(y, len(open('reqs.txt').read().splitlines()) > 10)"],
        check: |o| value_is(o, "([], True)"),
    },
    Idiom {
        name: "!pip install -q x > /dev/null 2>&1 installs and says nothing",
        cells: &[
            "!pip install -q humanize > /dev/null 2>&1\nimport humanize\nhumanize.intcomma(1234567)",
        ],
        check: |o| {
            stdout_is(o, "")?;
            expect(o.stderr().is_empty(), || o.stderr().to_owned())?;
            value_is(o, "'1,234,567'")
        },
    },
    Idiom {
        name: "%pip install x 2>/dev/null installs, its output shown",
        cells: &["%pip install humanize 2>/dev/null\nimport humanize\nhumanize.intcomma(1234567)"],
        check: |o| {
            stdout_has(o, &["humanize"])?;
            value_is(o, "'1,234,567'")
        },
    },
    Idiom {
        name: "a pip line's output and errors go where each redirection says, left to right",
        cells: &[
            "open('s.py', 'w').write('import sys\\nprint(1)\\nprint(2, file=sys.stderr)\\n')\n!python s.py > out.txt 2> err.txt\n!python s.py &> both.txt\n!python s.py 2>&1 > late.txt\n(open('out.txt').read(), open('err.txt').read(), open('both.txt').read(), open('late.txt').read())",
        ],
        check: |o| {
            // `2>&1 > late.txt`: the errors go where the output went before it.
            stdout_is(o, "2\n")?;
            expect(o.stderr().is_empty(), || o.stderr().to_owned())?;
            value_is(o, "('1\\n', '2\\n', '1\\n2\\n', '1\\n')")
        },
    },
    Idiom {
        name: "/dev/null is a stream as a file is; 1>&2, quoted paths and %uv pip read too",
        cells: &[
            "!python -c \"import sys; sys.stdout.buffer.write(b'x'); print(sys.stdout.isatty())\" > /dev/null\nok = _exit_code\n!python -c \"print('to err')\" 1>&2\n!python -c \"print('quoted')\" > \"out file.txt\"\n%uv pip install humanize > /dev/null\n(ok, _exit_code, open('out file.txt').read())",
        ],
        check: |o| {
            stdout_is(o, "")?;
            stderr_has(o, "to err")?;
            value_is(o, "(0, 0, 'quoted\\n')")
        },
    },
    Idiom {
        name: "a refused command line leaves the file its redirect names as it was",
        cells: &[
            "open('p', 'w').write('precious\\n')\nx = !pip freeze | head > p\n(open('p').read(), 'shell command line' in x.s)",
        ],
        check: |o| value_is(o, "('precious\\n', True)"),
    },
    Idiom {
        name: "%time expr; hides the value",
        cells: &["%time sum(range(1000));"],
        check: |o| {
            stdout_has(o, &["Wall time:"])?;
            expect(!o.has_value(), || format!("a value: {}", o.value()))
        },
    },
    Idiom {
        name: "IPython.core.debugger.set_trace() says there is no debugger, and the code goes on",
        cells: &["from IPython.core.debugger import set_trace\nset_trace()\n'went on'"],
        check: |o| {
            stderr_has(o, "breakpoint ignored")?;
            value_is(o, "'went on'")
        },
    },
    Idiom {
        name: "a magic of one's own parses its options with magic_arguments",
        cells: &[
            "from IPython.core.magic import register_line_magic\nfrom IPython.core.magic_arguments import argument, magic_arguments, parse_argstring\n@magic_arguments()\n@argument('-n', type=int, default=1)\n@argument('word')\n@register_line_magic\ndef shout(line):\n    \"\"\"Shouts.\"\"\"\n    args = parse_argstring(shout, line)\n    print((args.word.upper() + ' ') * args.n)\n%shout hey -n 2\ntry:\n    %shout\nexcept Exception as e:\n    caught = (type(e).__name__, str(e))\n(caught, shout.__doc__.splitlines()[0])",
        ],
        check: |o| {
            stdout_is(o, "HEY HEY \n")?;
            value_is(
                o,
                "(('UsageError', 'the following arguments are required: word'),\n 'usage: %shout [-n N] word')",
            )
        },
    },
    Idiom {
        name: "sympy's init_printing shows expressions pretty-printed",
        cells: &[
            "import sympy as sp\nsp.init_printing()\nx = sp.symbols('x')\nsp.integrate(x**2, x)",
        ],
        check: |o| value_is(o, " 3\nx \n──\n3 "),
    },
    Idiom {
        name: "%tb shows the last error's traceback again",
        cells: &["def f():\n    return 1 / 0\nf()", "%tb"],
        check: |o| {
            stderr_has(o, "ZeroDivisionError: division by zero")?;
            stderr_has(o, "return 1 / 0")
        },
    },
    Idiom {
        name: "%rerun runs the cell before again, after printing it",
        cells: &["x = 1", "x += 1", "%rerun\nx"],
        check: |o| {
            stdout_has(o, &["=== Executing: ===\nx += 1\n=== Output: ===\n"])?;
            value_is(o, "3")
        },
    },
    Idiom {
        name: "%recall and %macro say what to use instead",
        cells: &["%recall 1"],
        check: |o| {
            expect(o.error() == "UsageError", || o.error_text())?;
            expect(o.error_text().contains("%rerun"), || o.error_text())
        },
    },
    Idiom {
        name: "%pylab puts numpy and pyplot's names in the namespace",
        cells: &["%pylab inline\n(linspace(0, 1, 3).tolist(), plt.__name__, np.__name__)"],
        check: |o| {
            stdout_has(
                o,
                &["Populating the interactive namespace from numpy and matplotlib"],
            )?;
            value_is(o, "([0.0, 0.5, 1.0], 'matplotlib.pyplot', 'numpy')")
        },
    },
    Idiom {
        name: "%alias_magic makes %t stand for %timeit",
        cells: &["%alias_magic t timeit\n%t -n1 -r1 sum(range(10))"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Created `%t` as an alias for `%timeit`.",
                    "Created `%%t` as an alias for `%%timeit`.",
                    "per loop",
                ],
            )
        },
    },
    Idiom {
        name: "%%script false --no-raise-error keeps a cell from running",
        cells: &["%%script false --no-raise-error\nprint('never')"],
        check: |o| {
            stdout_is(o, "")?;
            expect(o.stderr().is_empty(), || o.stderr().to_owned())
        },
    },
    Idiom {
        name: "%%script false keeps a cell from running whatever its options or path",
        cells: &[
            "%%script --out o /bin/false --no-raise-error\nprint('never')\n",
            "%%script --bg false\nprint('never')",
        ],
        check: |o| {
            stdout_is(o, "")?;
            expect(o.stderr().is_empty(), || o.stderr().to_owned())
        },
    },
    Idiom {
        name: "a %rerun of a %rerun does not run itself over and over",
        cells: &["x = 1", "%rerun", "%rerun\nx"],
        check: |o| {
            stderr_has(o, "%rerun inside a %rerun")?;
            expect(
                o.stdout().matches("=== Executing: ===").count() == 1,
                || o.stdout().to_owned(),
            )?;
            value_is(o, "1")
        },
    },
    Idiom {
        name: "%%script false fails, as in IPython",
        cells: &["%%script false\nprint('never')"],
        check: |o| {
            expect(o.error() == "CalledProcessError", || o.error_text())?;
            expect(!o.stdout().contains("never"), || o.stdout().to_owned())
        },
    },
    Idiom {
        name: "%%capture --no-display keeps the printing and shows the value",
        cells: &[
            "%%capture c --no-display\nprint('kept')\n40 + 2",
            "c.stdout",
        ],
        check: |o| value_is(o, "'kept\\n'"),
    },
    Idiom {
        name: "the value of a %%capture --no-display cell is the cell's",
        cells: &[
            "%%capture c --no-display\nprint('kept')\n40 + 2",
            "(_, Out[1])",
        ],
        check: |o| value_is(o, "(42, 42)"),
    },
    Idiom {
        name: "traceback.print_exc() of a missing module says how it installs",
        cells: &[
            "import traceback\ntry:\n    import humanize\nexcept ImportError:\n    traceback.print_exc()",
        ],
        check: |o| {
            stderr_has(o, "No module named 'humanize': it is neither built into")?;
            expect(!o.stderr().contains("Site initialization"), || {
                o.stderr().to_owned()
            })
        },
    },
    Idiom {
        name: "socket.getfqdn() falls back to the host name",
        cells: &["import socket\nsocket.getfqdn() == socket.gethostname()"],
        check: |o| value_is(o, "True"),
    },
    Idiom {
        name: "%dhist lists the directories %cd visited",
        cells: &["import os\nos.makedirs('d', exist_ok=True)\n%cd -q d\n%cd -q /\n%dhist"],
        check: |o| stdout_is(o, "Directory history (kept in _dh)\n0: /\n1: /d\n2: /\n"),
    },
    Idiom {
        name: "%cd -N goes to the directory %dhist numbers N, and _dh lists them",
        cells: &[
            "import os\nos.makedirs('d', exist_ok=True)\n%cd -q d\n%cd -q /\n%cd -q .\n%cd -q -1\n(_dh, os.getcwd())",
        ],
        check: |o| value_is(o, "(['/', '/d', '/', '/d'], '/d')"),
    },
    Idiom {
        name: "%rerun of a failing cell shows the error at the user's line",
        cells: &["def f():\n    return 1 / 0", "f()", "%rerun"],
        check: |o| {
            stderr_has(o, "ZeroDivisionError: division by zero")?;
            stderr_has(o, "return 1 / 0")?;
            expect(!o.stderr().contains("<sandbox"), || o.stderr().to_owned())
        },
    },
    Idiom {
        name: "%alias_magic --line --params keeps its parameters and makes a line magic only",
        cells: &["%alias_magic --line --params \"-n 1 -r 1\" t2 timeit\n%t2 sum(range(10))"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Created `%t2` as an alias for `%timeit -n 1 -r 1`.",
                    "of 1 run, 1 loop each",
                ],
            )?;
            expect(!o.stdout().contains("%%t2"), || o.stdout().to_owned())
        },
    },
    Idiom {
        name: "%alias says there is no shell for the command",
        cells: &["%alias hello echo hi"],
        check: |o| {
            stderr_has(
                o,
                "there is no shell in this sandbox, so `echo hi` cannot run",
            )
        },
    },
    Idiom {
        name: "a notebook check finds a notebook",
        cells: &[
            "def in_notebook():\n    try:\n        return get_ipython().__class__.__name__ == 'ZMQInteractiveShell'\n    except NameError:\n        return False\nin_notebook()",
        ],
        check: |o| value_is(o, "True"),
    },
    Idiom {
        name: "numpy asked to raise on floating-point errors says once that it cannot",
        cells: &[
            "import numpy as np, pickle\nwith np.errstate(divide='raise'):\n    r = np.array([1.0]) / 0\nold = np.seterr(all='raise')\nnp.seterr(**old)\n(r.tolist(), type(pickle.loads(pickle.dumps(np.errstate(all='ignore')))) is np.errstate)",
        ],
        check: |o| {
            stderr_has(o, "numpy cannot see floating-point errors in this sandbox")?;
            expect(o.stderr().matches("numpy cannot see").count() == 1, || {
                o.stderr().to_owned()
            })?;
            value_is(o, "([inf], True)")
        },
    },
    Idiom {
        name: "numpy's own error settings inside libraries say nothing",
        cells: &["import pandas as pd, numpy as np\n(pd.Series([1.0, 0.0]) / 0).tolist()"],
        check: |o| {
            expect(o.stderr().is_empty(), || o.stderr().to_owned())?;
            value_is(o, "[inf, nan]")
        },
    },
    Idiom {
        name: "%quickref prints a reference",
        cells: &["%quickref"],
        check: |o| stdout_has(o, &["quick reference", "%lsmagic"]),
    },
];
