//! Corpus idioms: programs and scripts (`!python`, `%%python`, `%run`),
//! the session's state (`%store`, `%autoreload`, events, `%%capture`d
//! figures) and the odds and ends of later rounds (sqlite, Excel, `tzset`).

use super::*;

/// The idioms of this part of the corpus.
pub const IDIOMS: &[Idiom] = &[
    Idiom {
        name: "!python script.py runs the script as a fresh program would",
        cells: &[
            "%%writefile train.py\nimport sys\nprint('training with', sys.argv[1:], __name__)\nif '--fail' in sys.argv:\n    raise ValueError('diverged')",
            "!python train.py --epochs 3\n!python3 train.py --fail\nstatus = _exit_code\nout = !python -c \"print(6 * 7)\"\n(status, out)",
        ],
        check: |o| {
            stdout_has(o, &["training with ['--epochs', '3'] __main__"])?;
            stderr_has(o, "ValueError: diverged")?;
            value_is(o, "(1, ['42'])")
        },
    },
    Idiom {
        name: "a misbehaving !python program leaves the notebook as it was",
        cells: &[
            "import os, sys\nhome = os.getcwd()\n!python -c \"import sys, os; sys.path = None; os.chdir('/tmp'); sys.stdout.close()\"\n!python -c \"import os; os._exit(3)\"\nafter_exit = _exit_code\n!python -c \"raise KeyboardInterrupt\"\nprint('still printing')\n(type(sys.path).__name__, os.getcwd() == home, after_exit, _exit_code)",
        ],
        check: |o| {
            stdout_has(o, &["still printing"])?;
            value_is(o, "('list', True, 3, 130)")
        },
    },
    Idiom {
        name: "%%script python and %%python run the cell as a program, as IPython does",
        cells: &[
            "%%script python --out said --err complained\nimport sys\nprint('args', sys.argv, __name__)\nprint('careful', file=sys.stderr)",
            "%%python3 --no-raise-error\nimport os; os.chdir('/tmp'); raise SystemExit(4)",
            "import os, subprocess\ntry:\n    get_ipython().run_cell_magic('python', '', 'print(\"last words\")\\nraise SystemExit(3)')\nexcept subprocess.CalledProcessError as e:\n    failed = e.returncode\n(said, complained, os.getcwd(), failed)",
        ],
        check: |o| {
            stdout_has(o, &["last words"])?;
            value_is(o, "(\"args [''] __main__\\n\", 'careful\\n', '/', 3)")
        },
    },
    Idiom {
        name: "%store keeps a variable and %store -r brings it back",
        cells: &[
            "import pandas as pd\nprices = pd.Series([1.5, 2.5])\nnames = ['a', 'b']\n%store prices names",
            "del prices, names\n%store -r\n%store\n(prices.sum(), names)",
        ],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Stored variables and their in-db values:",
                    "names  -> ['a', 'b']",
                ],
            )?;
            value_is(o, "(np.float64(4.0), ['a', 'b'])")
        },
    },
    Idiom {
        name: "%xmode says the mode it takes",
        cells: &["%xmode Minimal\n%xmode"],
        check: |o| {
            stdout_has(
                o,
                &[
                    "Exception reporting mode: Minimal",
                    "Exception reporting mode: Docs",
                ],
            )
        },
    },
    Idiom {
        name: "%run of a script ending sys.exit(main()) is quiet; a non-zero status says so",
        cells: &[
            "%%writefile cli.py\nimport sys\ndef main():\n    print('main ran')\n    return 0\nsteps = 3\nsys.exit(main())",
            "%%writefile failing.py\nimport sys\nreached = True\nsys.exit(2)",
            "%run cli.py\n%run failing.py\n(steps, reached)",
        ],
        check: |o| {
            stdout_has(o, &["main ran"])?;
            stderr_has(
                o,
                "An exception has occurred, use %tb to see the full traceback.\n\nSystemExit: 2",
            )?;
            value_is(o, "(3, True)")
        },
    },
    Idiom {
        name: "%run other.ipynb runs its code cells, magics and all",
        cells: &[
            "import json\ncells = [{'cell_type': 'markdown', 'source': ['# Prep']}, {'cell_type': 'code', 'source': ['rows = [1, 2, 3]\\n', 'total = sum(rows)\\n']}, {'cell_type': 'code', 'source': '%time doubled = total * 2\\ndef report():\\n    return f\"{doubled} from {len(rows)} rows\"'}]\njson.dump({'cells': cells, 'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, open('prep.ipynb', 'w'))",
            "%run prep.ipynb\nimport inspect\n(report(), inspect.getsource(report).splitlines()[0])",
        ],
        check: |o| {
            stdout_has(o, &["Wall time:"])?;
            value_is(o, "('12 from 3 rows', 'def report():')")
        },
    },
    Idiom {
        name: "tracebacks, inspect.getsource and warnings see the cell's lines, every cell",
        cells: &[
            "import warnings\ndef careful():\n    warnings.warn('check the units')\ncareful()",
            "import inspect, traceback\ndef boom():\n    raise ValueError('bad row')\ntry:\n    boom()\nexcept ValueError:\n    traceback.print_exc()\ncareful()\nprint(inspect.getsource(careful))",
        ],
        check: |o| {
            stderr_has(o, "    raise ValueError('bad row')")?;
            stderr_has(o, "UserWarning: check the units")?;
            stdout_has(o, &["def careful():\n    warnings.warn('check the units')"])
        },
    },
    Idiom {
        name: "%prun takes IPython's options and lists the code's own calls",
        cells: &[
            "def slow(n):\n    return sum(i * i for i in range(n))\n%prun -s cumulative -l 4 slow(10000)\nstats = %prun -q -r slow(10)\ntype(stats).__name__",
        ],
        check: |o| {
            stdout_has(o, &["Ordered by: cumulative time", ":1(slow)"])?;
            expect(!o.stdout().contains("<sandbox "), || {
                format!("the listing shows the sandbox's own frames: {}", o.stdout())
            })?;
            value_is(o, "'Stats'")
        },
    },
    Idiom {
        name: "%autoreload 2 runs the new code of a module the code rewrote",
        cells: &[
            "%load_ext autoreload\n%autoreload 2",
            "%%writefile helpers.py\nclass Point:\n    __slots__ = ('x',)\n    def __init__(self):\n        self.x = 7\ndef scale(x):\n    return x * 2\nclass Model:\n    def name(self):\n        return 'v1'",
            "import helpers\nfrom helpers import scale, Model\nmodel, point = Model(), helpers.Point()\n(scale(5), model.name())",
            "open('helpers.py', 'w').write(\"class Point:\\n    __slots__ = ('x',)\\n    def __init__(self):\\n        self.x = 7\\ndef scale(x):\\n    return x * 100\\nclass Model:\\n    def name(self):\\n        return 'version two'\\n\")",
            "(scale(5), model.name())",
            "open('helpers.py', 'w').write(\"class Point:\\n    __slots__ = ('x',)\\n    def __init__(self):\\n        self.x = 7\\ndef scale(x):\\n    return x * 1000\\nclass Model:\\n    def name(self):\\n        return 'version three'\\n\")",
            "(scale(5), model.name(), isinstance(model, helpers.Model), point.x)",
        ],
        check: |o| value_is(o, "(5000, 'version three', True, 7)"),
    },
    Idiom {
        name: "events, post-mortem state and a missing module's real package",
        cells: &[
            "ip = get_ipython()\nran = []\nip.events.register('post_run_cell', lambda result: ran.append(result.success))",
            "1/0",
            "import sys, pdb\npdb.pm()\ntry:\n    import cv2\nexcept ModuleNotFoundError as e:\n    missing = e\n(ran, type(sys.last_exc).__name__)",
        ],
        check: |o| {
            stderr_has(o, "no post-mortem debugger")?;
            value_is(o, "([True, False], 'ZeroDivisionError')")
        },
    },
    Idiom {
        name: "%%capture keeps a figure instead of showing it, and show() brings it back",
        cells: &[
            "%%capture drawn\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('plotted')",
            "from IPython.utils import io\nwith io.capture_output() as quiet:\n    print('hidden')\n(len(drawn.outputs), drawn.stdout, quiet.stdout)",
        ],
        check: |o| {
            expect(o.images().is_empty(), || {
                format!("a captured figure was shown: {}", text(&o.result))
            })?;
            value_is(o, "(1, 'plotted\\n', 'hidden\\n')")
        },
    },
    Idiom {
        name: "a %%capture'd figure comes back with show()",
        cells: &[
            "%%capture drawn\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
            "drawn.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || {
                format!("wanted one image: {}", text(&o.result))
            })
        },
    },
    Idiom {
        name: "a __future__ import holds for later cells, as IPython compiles them",
        cells: &[
            "from __future__ import annotations",
            "def area(shape: Shape) -> float:\n    return 0.0\narea.__annotations__",
        ],
        check: |o| value_is(o, "{'shape': 'Shape', 'return': 'float'}"),
    },
    Idiom {
        name: "a text printer registered for a type shows its values",
        cells: &[
            "class Money:\n    def __init__(self, amount):\n        self.amount = amount\nget_ipython().display_formatter.formatters['text/plain'].for_type(Money, lambda m, p, cycle: p.text(f'${m.amount:,.2f}'))",
            "[Money(1234.5), (Money(2),)]",
        ],
        check: |o| value_is(o, "[$1,234.50, ($2.00,)]"),
    },
    Idiom {
        name: "restarting the kernel after %pip install says there is no need",
        cells: &[
            "%pip install -q humanize\nget_ipython().kernel.do_shutdown(restart=True)\nimport humanize\nhumanize.intword(1_200_000)",
        ],
        check: |o| {
            stdout_has(
                o,
                &["was not restarted: packages %pip installs import at once"],
            )?;
            value_is(o, "'1.2 million'")
        },
    },
    Idiom {
        name: "progress rewritten with carriage returns shows its last state, as a notebook does",
        cells: &[
            "import sys\nfor i in range(1, 201):\n    print(f'\\rprocessed {i}/200', end='')\nprint()\nfor pct in (0, 50, 100):\n    sys.stderr.write(f'\\rdownloading {pct}%')\nprint('done')",
        ],
        check: |o| {
            stdout_has(o, &["processed 200/200\ndone"])?;
            expect(!o.stdout().contains("processed 199/200"), || {
                format!("earlier states kept: {}", o.stdout())
            })?;
            expect(o.stderr() == "downloading 100%", || {
                format!("stderr {:?}", o.stderr())
            })
        },
    },
    Idiom {
        name: "a class a %run script or a %%python cell defines pickles, as in its own process",
        cells: &[
            "%%writefile job.py\nimport pickle\nclass Task:\n    pass\nprint(len(pickle.dumps(Task())) > 0)",
            "%run job.py\nget_ipython().run_cell_magic('python', '', 'import pickle\\nclass Row:\\n    pass\\nprint(\"row pickles\", len(pickle.dumps(Row())) > 0)')",
        ],
        check: |o| stdout_has(o, &["True\nrow pickles True"]),
    },
    Idiom {
        name: "text printed between figures says which figure it stands beside",
        cells: &[
            "import matplotlib.pyplot as plt\nfor name in ('ridge', 'lasso'):\n    print('model', name)\n    plt.figure(); plt.plot([1, 2])\n    plt.show()\n    print('score of', name)",
        ],
        check: |o| {
            stdout_has(
                o,
                &[
                    "model ridge\n[Image 1]\nscore of ridge\nmodel lasso\n[Image 2]\nscore of lasso\n",
                ],
            )?;
            expect(o.images().len() == 2, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "sys.exit() in a cell reads as IPython shows it",
        cells: &["import sys\nsys.exit(0)"],
        check: |o| {
            let said = o.error_text();
            expect(
                said.contains("An exception has occurred, use %tb to see the full traceback.")
                    && said.contains("SystemExit: 0")
                    && !said.contains("Traceback (most recent call last)"),
                || said.to_string(),
            )
        },
    },
    Idiom {
        name: "a statsmodels coefficient table as the last value shows its rows",
        cells: &[
            "import numpy as np, statsmodels.api as sm\nX = sm.add_constant(np.arange(10.0))\ny = 2 * np.arange(10.0) + np.sin(np.arange(10.0))\nsm.OLS(y, X).fit().summary().tables[1]",
        ],
        check: |o| {
            clean(o)?;
            expect(
                o.value().contains("coef") && o.value().contains("x1"),
                || format!("value {:?}", o.value()),
            )
        },
    },
    Idiom {
        name: "time.tzset() takes UTC and refuses another zone, naming zoneinfo",
        cells: &[
            "import os, time\nos.environ['TZ'] = 'UTC'\ntime.tzset()\nos.environ['TZ'] = 'Europe/Paris'\ntime.tzset()",
        ],
        check: |o| {
            expect(o.error() == "OSError", || o.error_text())?;
            expect(o.error_text().contains("ZoneInfo('Europe/Paris')"), || {
                o.error_text()
            })
        },
    },
    Idiom {
        name: "a standard module WASI leaves out says so",
        cells: &["import resource"],
        check: |o| {
            expect(o.error() == "ModuleNotFoundError", || o.error_text())?;
            expect(
                o.error_text()
                    .contains("Unsupported platform for standard library module"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "sqlite",
        cells: &[
            "import sqlite3\ndb = sqlite3.connect(':memory:')\ndb.execute('create table t (x)')\ndb.executemany('insert into t values (?)', [(1,), (2,)])\ndb.execute('select sum(x) from t').fetchone()",
        ],
        check: |o| value_is(o, "(3,)"),
    },
    Idiom {
        name: "an Excel round trip",
        cells: &[
            "import pandas as pd\npd.DataFrame({'a': [1, 2]}).to_excel('t.xlsx', index=False)\npd.read_excel('t.xlsx')['a'].tolist()",
        ],
        check: |o| value_is(o, "[1, 2]"),
    },
];
