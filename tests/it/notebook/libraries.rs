//! Corpus idioms: threads and processes, POSIX lookups, the libraries
//! notebooks import, and the idioms that worked before (`display(df)`, plots,
//! seaborn, tqdm, top-level `await`, `input()`).

use super::*;

/// The idioms of this part of the corpus.
pub const IDIOMS: &[Idiom] = &[
    Idiom {
        name: "ThreadPoolExecutor().map",
        cells: &[
            "from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(max_workers=4) as ex:\n    out = list(ex.map(lambda x: x * x, range(6)))\nout",
        ],
        check: |o| value_is(o, "[0, 1, 4, 9, 16, 25]"),
    },
    Idiom {
        name: "ThreadPoolExecutor submit and as_completed",
        cells: &[
            "from concurrent.futures import ThreadPoolExecutor, as_completed\nwith ThreadPoolExecutor() as ex:\n    futures = {ex.submit(pow, 2, n): n for n in range(5)}\n    got = sorted((futures[f], f.result()) for f in as_completed(futures))\ngot",
        ],
        check: |o| value_is(o, "[(0, 1), (1, 2), (2, 4), (3, 8), (4, 16)]"),
    },
    Idiom {
        name: "threading.Thread start and join",
        cells: &[
            "import threading\nresults = {}\ndef work(n):\n    results[n] = sum(range(n))\nthreads = [threading.Thread(target=work, args=(n,)) for n in (10, 100, 1000)]\nfor t in threads: t.start()\nfor t in threads: t.join()\nsorted(results.items())",
        ],
        check: |o| value_is(o, "[(10, 45), (100, 4950), (1000, 499500)]"),
    },
    Idiom {
        name: "a consumer thread and a queue",
        cells: &[
            "import threading, queue\nq, seen = queue.Queue(), []\ndef consume():\n    while (item := q.get()) is not None:\n        seen.append(item * 10)\nworker = threading.Thread(target=consume)\nworker.start()\nfor i in range(4):\n    q.put(i)\nq.put(None)\nworker.join()\nseen",
        ],
        check: |o| value_is(o, "[0, 10, 20, 30]"),
    },
    Idiom {
        name: "waiting on an event nothing can set fails at once",
        cells: &["import threading\nthreading.Event().wait()"],
        check: |o| {
            expect(o.error() == "NeedsAnotherThread", || o.error_text())?;
            expect(
                o.error_text()
                    .contains("would wait forever for an event to be set"),
                || o.error_text(),
            )
        },
    },
    Idiom {
        name: "asyncio.to_thread",
        cells: &[
            "import asyncio\nawait asyncio.gather(asyncio.to_thread(sum, [1, 2]), asyncio.to_thread(max, [3, 4]))",
        ],
        check: |o| value_is(o, "[3, 4]"),
    },
    Idiom {
        name: "multiprocessing.Pool.map",
        cells: &[
            "from multiprocessing import Pool\nwith Pool(4) as pool:\n    doubled = pool.map(abs, [-1, -2, 3])\ndoubled",
        ],
        check: |o| value_is(o, "[1, 2, 3]"),
    },
    Idiom {
        name: "os.getuid, pwd and getpass",
        cells: &[
            "import os, pwd, getpass\n(os.getuid(), os.geteuid(), pwd.getpwuid(os.getuid()).pw_name, getpass.getuser())",
        ],
        check: |o| value_is(o, "(1000, 1000, 'user', 'user')"),
    },
    Idiom {
        name: "urlparse splits as natively, each time (an error too)",
        cells: &[
            "from urllib.parse import urlparse, urlsplit\nout = []\nfor u in ['HTTP://User:Pw@[::1]:80/x;p?q=1#f', 'http://[::1', b'//h/p?q'] * 2:\n    try:\n        out.append(tuple(urlparse(u)))\n    except ValueError as e:\n        out.append(str(e))\nclass Loose(str):\n    __eq__ = lambda self, other: self.lower() == str(other).lower()\n    __hash__ = lambda self: hash(self.lower())\nurlparse(Loose('HTTP://A/B?Q'))\nprint(out + [tuple(urlsplit('x' * 3000 + '?q'))[3], tuple(urlparse('http://a/b?q'))[1:5]])",
        ],
        check: |o| {
            let once = "('http', 'User:Pw@[::1]:80', '/x', 'p', 'q=1', 'f'), 'Invalid IPv6 URL', (b'', b'h', b'/p', b'', b'q', b'')";
            stdout_is(o, &format!("[{once}, {once}, 'q', ('a', '/b', '', 'q')]\n"))
        },
    },
    Idiom {
        name: "ssl and http.client import complete",
        cells: &[
            "import ssl, http.client\nctx = ssl.create_default_context()\n(ctx.verify_mode == ssl.CERT_REQUIRED, ctx.check_hostname, hasattr(http.client, 'HTTPSConnection'))",
        ],
        check: |o| value_is(o, "(True, True, True)"),
    },
    Idiom {
        name: "import black and format code",
        cells: &[
            "%pip install -q black\nimport black\nblack.format_str('x=[1,2 ,3]', mode=black.Mode())",
        ],
        check: |o| value_is(o, "'x = [1, 2, 3]\\n'"),
    },
    Idiom {
        name: "import nltk and tokenize",
        cells: &[
            "%pip install -q nltk\nfrom nltk.tokenize import wordpunct_tokenize\nwordpunct_tokenize('Hello, world!')",
        ],
        check: |o| value_is(o, "['Hello', ',', 'world', '!']"),
    },
    Idiom {
        name: "from tqdm.notebook import tqdm",
        cells: &[
            "from tqdm.notebook import tqdm\ntotal = 0\nfor i in tqdm(range(5)):\n    total += i\ntotal",
        ],
        check: |o| value_is(o, "10"),
    },
    Idiom {
        name: "sympy expressions show as text",
        cells: &["import sympy as sp\nx = sp.Symbol('x')\nsp.expand((x + 1) ** 2)"],
        check: |o| value_is(o, "x**2 + 2*x + 1"),
    },
    // What already worked, and must keep working.
    Idiom {
        name: "display(df)",
        cells: &["import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\ndisplay(df)"],
        check: |o| stdout_has(o, &["   a  b\n0  1  3\n1  2  4\n"]),
    },
    Idiom {
        name: "a DataFrame as the last value",
        cells: &["import pandas as pd\npd.DataFrame({'a': [1, 2]})"],
        check: |o| value_is(o, "   a\n0  1\n1  2"),
    },
    Idiom {
        name: "several plt.show() figures",
        cells: &[
            "import matplotlib.pyplot as plt\nfor k in (1, 2):\n    plt.plot([0, k])\n    plt.show()",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images() == ["image/png", "image/png"], || {
                format!("{:?}", o.images())
            })
        },
    },
    Idiom {
        name: "df.plot() without show",
        cells: &["import pandas as pd\npd.DataFrame({'y': [3, 1, 2]}).plot();"],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "display_html(raw=True) and IPython's pretty printer",
        cells: &[
            "from IPython.display import display_html, Pretty, display\ndisplay_html('<b>bold</b>', raw=True)\ndisplay(Pretty('pretty text'))\nclass Point:\n    def _repr_pretty_(self, p, cycle):\n        p.text('Point(1, 2)')\nPoint()",
        ],
        check: |o| {
            stdout_has(o, &["<b>bold</b>", "pretty text"])?;
            value_is(o, "Point(1, 2)")
        },
    },
    Idiom {
        name: "a plotly figure says what it holds and what gives an image",
        cells: &[
            "%pip install -q plotly",
            "import plotly.express as px\nfig = px.bar(x=['a', 'b'], y=[1, 2], title='Sales')\nfig.show()\nfig",
        ],
        check: |o| {
            clean(o)?;
            stdout_has(o, &["<plotly Figure 'Sales': 1 bar>", "matplotlib"])?;
            expect(o.value().starts_with("<plotly Figure 'Sales'"), || {
                o.value().to_owned()
            })
        },
    },
    Idiom {
        name: "seaborn",
        cells: &[
            "import seaborn as sns, pandas as pd\nsns.barplot(data=pd.DataFrame({'k': ['a', 'b'], 'v': [1, 2]}), x='k', y='v');",
        ],
        check: |o| {
            clean(o)?;
            expect(o.images().len() == 1, || format!("{:?}", o.images()))
        },
    },
    Idiom {
        name: "joblib and sklearn n_jobs",
        cells: &[
            "from joblib import Parallel, delayed\nfrom sklearn.ensemble import RandomForestClassifier\nsquares = Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(4))\nclf = RandomForestClassifier(n_estimators=5, n_jobs=-1, random_state=0).fit([[0], [1], [2], [3]], [0, 0, 1, 1])\n(squares, clf.predict([[3]]).tolist())",
        ],
        check: |o| value_is(o, "([0, 1, 4, 9], [1])"),
    },
    Idiom {
        name: "tqdm",
        cells: &["from tqdm import tqdm\nfor _ in tqdm(range(3)):\n    pass"],
        check: |o| stderr_has(o, "3/3"),
    },
    Idiom {
        name: "top-level await",
        cells: &["import asyncio\nawait asyncio.sleep(0.01)\n'slept'"],
        check: |o| value_is(o, "'slept'"),
    },
    Idiom {
        name: "input() is refused clearly",
        cells: &["input('name? ')"],
        check: |o| {
            expect(o.error() == "EOFError", || o.error_text())?;
            expect(o.error_text().contains("cannot ask questions"), || {
                o.error_text()
            })
        },
    },
    Idiom {
        name: "input() reads what the code put in sys.stdin",
        cells: &["import io, sys\nsys.stdin = io.StringIO('Ada\\n')\ninput('name? ')"],
        check: |o| value_is(o, "'Ada'"),
    },
    Idiom {
        name: "signal.alarm() says no timer can interrupt the code",
        cells: &["import signal\nhasattr(signal, 'alarm')", "signal.alarm(5)"],
        check: |o| {
            expect(o.error() == "AttributeError", || o.error_text())?;
            expect(o.error_text().contains("timeout_seconds"), || {
                o.error_text()
            })
        },
    },
];
